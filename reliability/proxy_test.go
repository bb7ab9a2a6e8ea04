package reliability

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
	"github.com/gorun-hpc/gorun/transport/rdma/faulty"
)

// viaProxy connects a tcp initiator to a target through p (Target is set
// here) and returns the target, both conns and the initiator's device.
func viaProxy(t testing.TB, p *faulty.Proxy) (*target, rdma.Conn, rdma.Conn, rdma.Device) {
	t.Helper()
	tg := newTarget(t, "tcp")
	p.Target = tg.ln.Addr().String()
	if err := p.Listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	ctx := ctxFor(t, 15*time.Second)
	got := make(chan rdma.Conn, 1)
	go func() {
		c, _ := tg.ln.Accept(ctx)
		got <- c
	}()
	d := openDev(t, "tcp", token)
	c, err := d.Dial(ctx, p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	s := <-got
	if s == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return tg, c, s, d
}

// handshakeBytes measures how many bytes a tcp dialer sends before its
// first frame.
func handshakeBytes(t testing.TB) int64 {
	tg := newTarget(t, "tcp")
	rec := record(t, tg.ln.Addr().String())
	ctx := ctxFor(t, 15*time.Second)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if c, _ := tg.ln.Accept(ctx); c != nil {
			c.Close()
		}
	}()
	d := openDev(t, "tcp", token)
	c, err := d.Dial(ctx, rec.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	<-done
	c.Close()
	time.Sleep(50 * time.Millisecond)
	return int64(len(rec.bytes()))
}

//lint:ignore ST1008 the completion and its error are one result; the bytes are a diagnostic
func writePattern(t testing.TB, d rdma.Device, c rdma.Conn, tg *target, n int, timeout time.Duration) (rdma.WC, error, []byte) {
	src, err := d.Alloc(n, rdma.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	for i := range src.Bytes() {
		src.Bytes()[i] = byte(i*7 + 1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := c.PostWrite(1, src.Bytes(), src, rdma.FlagSignaled, tg.mr.Addr(), tg.mr.RKey()); err != nil {
		return rdma.WC{}, err, src.Bytes()
	}
	wc, err := c.GetSendComp(ctx)
	return wc, err, src.Bytes()
}

// A corrupted request header (rkey, length, address or op byte) never
// lands as data: the target refuses the request and the connection fails.
func TestCorruptHeaderNotDelivered(t *testing.T) {
	h := handshakeBytes(t)
	t.Logf("the tcp dialer's handshake is %d bytes", h)
	for name, off := range map[string]int64{"op": 1, "rkey": 10, "length": 15, "addr": 30} {
		t.Run(name, func(t *testing.T) {
			p := &faulty.Proxy{CorruptAt: h + off}
			tg, c, s, d := viaProxy(t, p)
			wc, err, _ := writePattern(t, d, c, tg, 2048, 3*time.Second)
			if p.Corrupted.Load() != 1 {
				t.Fatalf("proxy corrupted %d bytes", p.Corrupted.Load())
			}
			if err == nil && wc.Status == rdma.StatusSuccess {
				t.Errorf("write with a corrupted header completed successfully")
			}
			if err != nil { // the header's CRC fails the connection at once: no stall until the deadline
				t.Errorf("write with a corrupted header: no completion: %v", err)
			}
			t.Logf("completion %+v %v; target conn: %v", wc, err, s.Err())
			tg.intact(t)
		})
	}
}

// A corrupted payload byte must not be delivered as data: with
// GORUN_CHECKSUM=1 the tcp provider verifies a CRC32C of each frame and
// fails the connection.
func TestCorruptPayloadNotDelivered(t *testing.T) {
	t.Setenv("GORUN_CHECKSUM", "1")
	h := handshakeBytes(t)
	const n = 4096
	p := &faulty.Proxy{CorruptAt: h + 32 + n/2} // the middle of the first write's payload
	tg, c, _, d := viaProxy(t, p)
	wc, err, src := writePattern(t, d, c, tg, n, 3*time.Second)
	if p.Corrupted.Load() != 1 {
		t.Fatalf("proxy corrupted %d bytes", p.Corrupted.Load())
	}
	delivered := err == nil && wc.Status == rdma.StatusSuccess
	differs := !bytes.Equal(tg.mr.Bytes()[:n], src)
	switch {
	case delivered && differs:
		t.Fatal("corrupted payload delivered with a successful completion")
	case delivered:
		t.Fatal("the proxy flipped a byte but the target region matches: the test did not corrupt the payload")
	}
	t.Logf("refused: %+v %v", wc, err)
}

// A partition (the proxy stops forwarding, sockets stay open) stalls the
// connection without an error, and a heal lets the stalled write finish
// with its data intact: TCP retransmits, nothing is lost or duplicated.
// A partition that outlives the caller's deadline ends the wait with the
// context's error: the transport has no liveness check of its own, so the
// communicator's timeout is what detects a partition.
func TestProxyPartitionAndHeal(t *testing.T) {
	p := &faulty.Proxy{}
	tg, c, _, d := viaProxy(t, p)
	if wc, err, _ := writePattern(t, d, c, tg, 1024, 3*time.Second); err != nil || wc.Status != rdma.StatusSuccess {
		t.Fatalf("write before the partition: %+v %v", wc, err)
	}
	p.Partition(true)
	start := time.Now()
	wc, err, _ := writePattern(t, d, c, tg, 1024, 500*time.Millisecond)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("during the partition: %+v %v, want the deadline", wc, err)
	}
	t.Logf("partitioned write: no completion, wait ended by its deadline after %v", time.Since(start).Round(time.Millisecond))
	// The first request is still in flight: heal and let it complete.
	p.Partition(false)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if wc, err := c.GetSendComp(ctx); err != nil || wc.Status != rdma.StatusSuccess {
		t.Fatalf("after the heal: %+v %v", wc, err)
	}
	for i, v := range tg.mr.Bytes()[:1024] {
		if v != byte(i*7+1) {
			t.Fatalf("after the heal: byte %d = %#x", i, v)
		}
	}
}
