package tcp

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// Both ends read and write large blocks at each other at once: the reader
// of each end must never wait for its writer, or full socket buffers on
// both sides would deadlock.
func TestBidirectionalBulk(t *testing.T) {
	a, b, devA, devB := pair(t, rdma.Config{})
	const n, reps = 4 << 20, 6
	type side struct {
		c        rdma.Conn
		src, dst *rdma.MR // src: remote-read source; dst: remote-write target
		local    *rdma.MR // destination of this side's reads
		peerSrc  *rdma.MR
		peerDst  *rdma.MR
	}
	mk := func(d rdma.Device, seed byte) (src, dst, local *rdma.MR) {
		var err error
		if src, err = d.Alloc(n, rdma.AccessRemoteRead); err != nil {
			t.Fatal(err)
		}
		fill(src.Bytes(), seed)
		if dst, err = d.Alloc(n, rdma.AccessRemoteWrite); err != nil {
			t.Fatal(err)
		}
		if local, err = d.Alloc(n, rdma.AccessLocalWrite); err != nil {
			t.Fatal(err)
		}
		return
	}
	sa, da, la := mk(devA, 1)
	sb, db, lb := mk(devB, 2)
	sides := []side{{a, sa, da, la, sb, db}, {b, sb, db, lb, sa, da}}
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for _, s := range sides {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			for i := range reps {
				if err := s.c.PostWrite(uint64(2*i), s.src.Bytes(), s.src, rdma.FlagSignaled, s.peerDst.Addr(), s.peerDst.RKey()); err != nil {
					errs <- err
					return
				}
				if err := s.c.PostRead(uint64(2*i+1), s.local.Bytes(), s.local, rdma.FlagSignaled, s.peerSrc.Addr(), s.peerSrc.RKey()); err != nil {
					errs <- err
					return
				}
			}
			for i := range 2 * reps {
				wc, err := s.c.GetSendComp(ctx)
				if err != nil || wc.Status != rdma.StatusSuccess || wc.WRID != uint64(i) {
					t.Errorf("completion %d: %+v %v", i, wc, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if !bytes.Equal(la.Bytes(), sb.Bytes()) || !bytes.Equal(lb.Bytes(), sa.Bytes()) {
		t.Fatal("read data wrong")
	}
}

// Several goroutines post on one conn; every completion arrives once.
func TestConcurrentPosters(t *testing.T) {
	a, _, devA, devB := pair(t, rdma.Config{SendQueueDepth: 64})
	src := make([]byte, 512)
	sMR := mustReg(t, devA, src, 0)
	dst := make([]byte, 512)
	dMR := mustReg(t, devB, dst, rdma.AccessRemoteWrite)
	const posters, each = 4, 300
	seen := make(chan uint64, posters*each)
	ctx := testCtx(t)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range posters * each {
			wc, err := a.GetSendComp(ctx)
			if err != nil || wc.Status != rdma.StatusSuccess {
				t.Errorf("%+v %v", wc, err)
				return
			}
			seen <- wc.WRID
		}
	}()
	var wg sync.WaitGroup
	for p := range posters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; {
				err := a.PostWrite(uint64(p*each+i), src, sMR, rdma.FlagSignaled, dMR.Addr(), dMR.RKey())
				if err == nil {
					i++
				} else if ctx.Err() != nil {
					t.Error(err)
					return
				} else {
					time.Sleep(50 * time.Microsecond) // queue full
				}
			}
		}()
	}
	wg.Wait()
	<-done
	close(seen)
	got := make(map[uint64]bool)
	for id := range seen {
		if got[id] {
			t.Fatalf("wrid %d completed twice", id)
		}
		got[id] = true
	}
	if len(got) != posters*each {
		t.Fatalf("%d completions, want %d", len(got), posters*each)
	}
}

// Closing either end during a large transfer ends it promptly on both.
func TestCloseDuringTransfer(t *testing.T) {
	for _, closer := range []string{"initiator", "target"} {
		t.Run(closer, func(t *testing.T) {
			a, b, devA, devB := pair(t, rdma.Config{})
			src, _ := devA.Alloc(8<<20, 0)
			dst, _ := devB.Alloc(8<<20, rdma.AccessRemoteWrite)
			for i := range 8 {
				if err := a.PostWrite(uint64(i), src.Bytes(), src, rdma.FlagSignaled, dst.Addr(), dst.RKey()); err != nil {
					t.Fatal(err)
				}
			}
			time.Sleep(time.Millisecond)
			if closer == "initiator" {
				a.Close()
			} else {
				b.Close()
			}
			ctx := testCtx(t)
			n := 0
			for {
				wc, err := a.GetSendComp(ctx)
				if err != nil {
					if ctx.Err() != nil {
						t.Fatal("completion queue never ended")
					}
					break
				}
				if wc.Status != rdma.StatusSuccess && wc.Status != rdma.StatusFlushed {
					t.Fatalf("wc %+v", wc)
				}
				n++
			}
			if n != 8 {
				t.Fatalf("%d completions, want 8 (done or flushed)", n)
			}
			a.Close()
			if err := src.Deregister(); err != nil {
				t.Fatalf("regions still held after close: %v", err)
			}
		})
	}
}

// A peer that breaks the protocol loses the connection; Err says why.
func TestProtocolViolation(t *testing.T) {
	a, b, _, _ := pair(t, rdma.Config{})
	b.(*conn).nc.Write(sealed(header{op: opAck, seq: 12345})) // acknowledges nothing outstanding
	ctx := testCtx(t)
	if _, err := a.GetRecvComp(ctx); ctx.Err() != nil || !errors.Is(err, rdma.ErrClosed) {
		t.Fatalf("GetRecvComp: %v", err)
	}
	if err := a.Err(); !errors.Is(err, errProtocol) || !errors.Is(err, rdma.ErrClosed) {
		t.Fatalf("Err: %v", err)
	}
	if _, err := b.GetRecvComp(ctx); ctx.Err() != nil || !errors.Is(err, rdma.ErrClosed) {
		t.Fatalf("peer GetRecvComp: %v", err)
	}
}

// A target holding the stream in an endless receiver-not-ready wait still
// notices that the initiator went away.
func TestPeerCloseDuringRNRWait(t *testing.T) {
	a, b, _, _ := pair(t, rdma.Config{RNRRetry: -1, RNRTimer: time.Millisecond})
	if err := a.PostSend(1, []byte("x"), nil, rdma.FlagInline); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // b is now waiting for a receive
	a.Close()
	ctx := testCtx(t)
	if _, err := b.GetRecvComp(ctx); ctx.Err() != nil || !errors.Is(err, rdma.ErrClosed) {
		t.Fatalf("peer did not see the end: %v", err)
	}
}
