//go:build linux

package engine

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/collectives"
	"github.com/gorun-hpc/gorun/internal/kernels"
	"github.com/gorun-hpc/gorun/transport/rdma"
	_ "github.com/gorun-hpc/gorun/transport/rdma/tcp"
)

// A broadcast's copy of DirectMin bytes goes zero-copy (the receiver sends
// a clear-to-send) on shm, and through the staging slots on tcp up to
// tcpDirectMin (Link.directMinOf); an allgather's from DirectMin on both.
// The data arrives either way.
func TestDirectThresholdByProvider(t *testing.T) {
	for _, tc := range []struct {
		provider  string
		allgather bool
		bytes     int // the message's
		direct    bool
	}{
		{"shm", false, DirectMin, true},
		{"shm", false, DirectMin - 4, false},
		{"tcp", false, DirectMin, false},
		{"tcp", false, tcpDirectMin - 4, false},
		{"tcp", false, tcpDirectMin, true},
		{"tcp", false, 4 * tcpDirectMin, true},
		{"tcp", true, DirectMin - 4, false},
		{"tcp", true, DirectMin, true},
	} {
		coll := collectives.Broadcast
		if tc.allgather {
			coll = collectives.AllGather
		}
		t.Run(fmt.Sprintf("%s/%s/%d", tc.provider, coll, tc.bytes), func(t *testing.T) {
			e := pairEngines(t, tc.provider, LinkParams{Slots: 4, SlotBytes: 1 << 20})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			n := tc.bytes / 4
			var p [2]*Plan
			var c [2]*Call
			for r := range 2 {
				if tc.allgather { // rank 0's block, then rank 1's: each receives the other's
					v := make([]float32, 2*n)
					for i := range n {
						v[r*n+i] = float32(r*10 + i%7 + 1)
					}
					b := f32(v)
					p[r] = Compile(collectives.RingAllGather(r, 2, n, n))
					c[r] = &Call{Coll: coll, DType: kernels.Float32, Count: n, Work: b, Input: b}
					continue
				}
				v := make([]float32, n)
				for i := range v {
					v[i] = float32((1 - r) * (i%7 + 1)) // the root's data; zeros on rank 1
				}
				b := f32(v)
				p[r] = Compile(collectives.ChainBroadcast(r, 2, 0, n, n))
				c[r] = &Call{Coll: coll, DType: kernels.Float32, Count: n, Work: b, Input: b}
			}
			if errs := runPair(ctx, e, p, c); errs[0] != nil || errs[1] != nil {
				t.Fatal(errs)
			}
			if got := link(e[1]).ctsSent; (got > 0) != tc.direct {
				t.Errorf("the receiver sent %d clear-to-sends; direct %v", got, tc.direct)
			}
			if string(c[1].Work) != string(c[0].Work) {
				t.Fatal("the ranks' buffers differ after the call")
			}
		})
	}
}

// A receiver whose Run fails after its clear-to-send went out revokes the
// buffer it advertised before Run returns: the sender, which has not
// entered the call (or has not seen the abort yet), writes by that
// address and rkey, and the write must fail on its link, not land in
// memory the caller has back (before, it landed: ddp's Wait gave a step's
// gradients back while a late peer still wrote them).
func TestFailedRunRevokesClearedBuffer(t *testing.T) {
	for _, tc := range []struct {
		provider string
		bytes    int
	}{{"shm", DirectMin}, {"tcp", tcpDirectMin}} {
		t.Run(tc.provider, func(t *testing.T) {
			e := pairEngines(t, tc.provider, LinkParams{Slots: 4, SlotBytes: 1 << 20})
			n := tc.bytes / 4
			recv := make([]byte, 4*n)
			p := Compile(collectives.ChainBroadcast(1, 2, 0, n, n))
			call := &Call{Coll: collectives.Broadcast, DType: kernels.Float32, Count: n, Work: recv, Input: recv}
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			err := e[1].Run(ctx, p, call, 0) // rank 0, the root, never starts it
			cancel()
			if err == nil {
				t.Fatal("the receive completed with no sender")
			}
			if link(e[1]).ctsSent == 0 {
				t.Fatal("no clear-to-send went out: the case is not direct")
			}
			l := link(e[0])
			deadline := time.Now().Add(10 * time.Second)
			for l.ctsArrived.Load() == 0 {
				if time.Now().After(deadline) {
					t.Fatal("the clear-to-send never arrived")
				}
				time.Sleep(time.Millisecond)
			}
			cts := &l.cts[0]
			src := make([]byte, len(recv))
			for i := range src {
				src[i] = 0xa5
			}
			mr, err := l.dev.Cache.Get(src)
			if err != nil {
				t.Fatal(err)
			}
			if err := l.conn.PostWrite(wrid(l.id, kindCtrl, 0), src, mr, rdma.FlagSignaled, cts.addr.Load(), cts.rkey.Load()); err != nil {
				return // refused at once
			}
			for !l.broken.Load() { // the write's error completion breaks the link
				if slices.Contains(recv, 0xa5) {
					t.Fatal("the sender's write landed in the buffer after the receiver's Run returned")
				}
				if time.Now().After(deadline) {
					t.Fatal("the write neither failed nor landed")
				}
				time.Sleep(time.Millisecond)
			}
			if slices.Contains(recv, 0xa5) {
				t.Fatal("the sender's write landed in the buffer after the receiver's Run returned")
			}
		})
	}
}
