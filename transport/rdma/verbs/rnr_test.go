//go:build linux && cgo && rdma

package verbs

import (
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

func TestRNRParams(t *testing.T) {
	for _, tc := range []struct {
		retry       int
		ms          float64
		count, code int
	}{
		{-1, 10, 7, 20},   // forever
		{0, 10, 0, 20},    // no retry
		{2, 10, 2, 20},    // as given; code 20 is 10.24 ms
		{7, 10, 6, 21},    // default: 70 ms in 6 waits of 15.36 ms
		{1000, 10, 7, 20}, // 10 s exceeds 6 × 491 ms: forever
		{100, 10, 6, 29},  // 1 s in 6 waits of 245.76 ms
		{3, 0.001, 3, 1},  // shortest timer
		{3, 10000, 3, 0},  // longest: code 0 is 655 ms
	} {
		count, code := rnrParams(tc.retry, tc.ms)
		if count != tc.count || code != tc.code {
			t.Errorf("rnrParams(%d, %v) = %d, %d; want %d, %d", tc.retry, tc.ms, count, code, tc.count, tc.code)
		}
	}
}

// TestFirstSendRNRTimer: a send that reaches a freshly accepted connection
// before its first receive is posted waits Config.RNRTimer between
// retries, not 655 ms. rdma_accept moves the QP to RTS with the
// connection manager's min_rnr_timer, code 0 (655.36 ms), before the
// reply goes out; the provider set Config.RNRTimer only once
// RDMA_CM_EVENT_ESTABLISHED had come, after the client could send, so a
// client that sent at once waited 655 ms for its first retry.
func TestFirstSendRNRTimer(t *testing.T) {
	d := openDev(t, rdma.Config{}) // RNRTimer 10ms: retries 15.36 ms apart
	ctx := ctxT(t)
	rb, _ := d.Alloc(64, rdma.AccessLocalWrite)
	sb, _ := d.Alloc(64, rdma.AccessLocalWrite)
	for round := range 6 {
		ln, err := d.Listen(ctx, vmIP(t)+":0")
		if err != nil {
			t.Fatal(err)
		}
		accepted := make(chan rdma.Conn, 1)
		go func() {
			c, err := ln.Accept(ctx)
			if err == nil {
				err = c.PostRecv(1, rb.Bytes(), rb)
			}
			if err != nil {
				t.Error("accept:", err)
			}
			accepted <- c
		}()
		c, err := d.Dial(ctx, ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := c.PostSend(2, sb.Bytes(), sb, rdma.FlagSignaled); err != nil {
			t.Fatal(err)
		}
		wc, err := c.GetSendComp(ctx)
		took := time.Since(start)
		mustWC(t, wc, err, 2, rdma.OpSend)
		if s := <-accepted; s != nil {
			s.Close()
		}
		c.Close()
		ln.Close()
		if took > 400*time.Millisecond {
			t.Fatalf("round %d: the first send completed after %v (a 655 ms RNR wait), want the receive found within Config.RNRTimer retries", round, took)
		}
		t.Logf("round %d: first send completed after %v", round, took)
	}
}
