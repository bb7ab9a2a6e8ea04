package reliability

import (
	"context"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// connect returns a connected (initiator, target) pair of provider.
func connect(t testing.TB, provider string) (*target, rdma.Conn, rdma.Conn, rdma.Device) {
	t.Helper()
	tg := newTarget(t, provider)
	ctx := ctxFor(t, 15*time.Second)
	got := make(chan rdma.Conn, 1)
	go func() {
		c, err := tg.ln.Accept(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- c
	}()
	d := openDev(t, provider, token)
	c, err := d.Dial(ctx, tg.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s := <-got
	if s == nil {
		t.FailNow()
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return tg, c, s, d
}

// A write with a wrong rkey, or beyond the region, fails with a remote
// access error, writes nothing, and moves both ends of the connection to
// the error state (as an RC queue pair): later posts fail or flush.
func TestBadRemoteAccessClosesConnection(t *testing.T) {
	for _, provider := range []string{"tcp", "shm"} {
		for _, tc := range []struct {
			name string
			addr func(mr *rdma.MR) uint64
			rkey func(mr *rdma.MR) uint32
		}{
			{"wrong-rkey", func(mr *rdma.MR) uint64 { return mr.Addr() }, func(mr *rdma.MR) uint32 { return mr.RKey() ^ 0x5a5a }},
			{"beyond-end", func(mr *rdma.MR) uint64 { return mr.Addr() + uint64(mr.Len()) - 8 }, func(mr *rdma.MR) uint32 { return mr.RKey() }},
			{"before-start", func(mr *rdma.MR) uint64 { return mr.Addr() - 8 }, func(mr *rdma.MR) uint32 { return mr.RKey() }},
			{"wrapping", func(mr *rdma.MR) uint64 { return ^uint64(0) - 4 }, func(mr *rdma.MR) uint32 { return mr.RKey() }},
		} {
			t.Run(provider+"/"+tc.name, func(t *testing.T) {
				tg, c, s, d := connect(t, provider)
				src, err := d.Alloc(64, rdma.AccessLocalWrite)
				if err != nil {
					t.Fatal(err)
				}
				for i := range src.Bytes() {
					src.Bytes()[i] = 0x11
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				err = c.PostWrite(1, src.Bytes(), src, rdma.FlagSignaled, tc.addr(tg.mr), tc.rkey(tg.mr))
				if err == nil {
					wc, werr := c.GetSendComp(ctx)
					if werr == nil && wc.Status == rdma.StatusSuccess {
						t.Fatalf("bad write completed successfully: %+v", wc)
					}
					t.Logf("completion: %+v %v", wc, werr)
				} else {
					t.Logf("post refused: %v", err)
				}
				tg.intact(t)
				// Both ends must now be in the error state.
				deadline := time.Now().Add(5 * time.Second)
				for (c.Err() == nil || s.Err() == nil) && time.Now().Before(deadline) {
					time.Sleep(10 * time.Millisecond)
				}
				if c.Err() == nil {
					t.Error("initiator's connection still usable after a remote access error")
				}
				if s.Err() == nil {
					t.Error("target's connection still usable after serving a bad request")
				}
				t.Logf("initiator: %v; target: %v", c.Err(), s.Err())
				if err := c.PostWrite(2, src.Bytes(), src, rdma.FlagSignaled, tg.mr.Addr(), tg.mr.RKey()); err == nil {
					if wc, werr := c.GetSendComp(ctx); werr == nil && wc.Status == rdma.StatusSuccess {
						t.Error("a good write succeeded on a connection in the error state")
					}
				}
				tg.intact(t)
			})
		}
	}
}
