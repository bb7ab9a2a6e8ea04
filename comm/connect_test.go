package comm

import (
	"fmt"
	"testing"

	"github.com/gorun-hpc/gorun/collectives"
)

// A new communicator connects only its start-up peers
// (collectives.InitPeers: at most 2·log2(n)+4), not a full mesh.
func TestConnectionsAtStart(t *testing.T) {
	for _, n := range []int{2, 5, 16, 33} {
		cs := newLocal(t, n)
		for _, c := range cs {
			want := len(collectives.InitPeers(c.rank, n))
			if got := c.Connections(); got != want || got > collectives.MaxInitPeers(n) {
				t.Errorf("n=%d rank %d: %d connections, want %d (bound %d)", n, c.rank, got, want, collectives.MaxInitPeers(n))
			}
		}
	}
}

// Peers outside the start-up set are connected when an operation first
// needs them, by both ends at once (alltoall) or by one (Send/Recv), and
// the results are right.
func TestConnectOnDemand(t *testing.T) {
	const n = 16
	cs := newLocal(t, n)
	ctx := testCtx(t)
	// 0 and 11 are not start-up peers at 16 ranks (those are ±2^k).
	if c := cs[0]; c.eng.Linked(11) {
		t.Fatal("rank 0 is connected to 11 at start")
	}
	errs := onAll(cs, func(c *Comm) error {
		switch c.rank {
		case 0:
			return Send(ctx, c, []int32{42}, 11, 7)
		case 11:
			buf := make([]int32, 1)
			if err := Recv(ctx, c, buf, 0, 7); err != nil {
				return err
			}
			if buf[0] != 42 {
				return fmt.Errorf("received %d", buf[0])
			}
		}
		return nil
	})
	mustAll(t, "send/recv", errs)
	if !cs[0].eng.Linked(11) || !cs[11].eng.Linked(0) {
		t.Fatal("send/recv did not connect 0 and 11")
	}
	for round := range 3 {
		errs = onAll(cs, func(c *Comm) error {
			send, recv := make([]int64, 2*n), make([]int64, 2*n)
			for i := range send {
				send[i] = int64(c.rank*1000 + i + round)
			}
			if err := AllToAll(ctx, c, send, recv); err != nil {
				return err
			}
			for b := range n {
				for k := range 2 {
					if want := int64(b*1000 + 2*c.rank + k + round); recv[2*b+k] != want {
						return fmt.Errorf("block %d[%d] = %d, want %d", b, k, recv[2*b+k], want)
					}
				}
			}
			return nil
		})
		mustAll(t, "alltoall", errs)
	}
	for _, c := range cs {
		if got := c.Connections(); got != n-1 {
			t.Errorf("rank %d: %d connections after alltoall, want %d", c.rank, got, n-1)
		}
	}
}

// The ranks of a world in one process share its endpoints, decoded once
// (localHall.endpoints), not n each: n² of them took 7 GiB at 4,096
// ranks. Each rank still sees every rank's own address.
func TestLocalEndpointsShared(t *testing.T) {
	const n = 6
	cs := newLocal(t, n)
	for _, c := range cs {
		for q := range n {
			if c.conn.eps[q] != cs[0].conn.eps[q] {
				t.Fatalf("rank %d's endpoint of rank %d is its own copy", c.rank, q)
			}
		}
	}
	for q := range n {
		if cs[q].conn.eps[q].addrs["mem"] == cs[(q+1)%n].conn.eps[(q+1)%n].addrs["mem"] {
			t.Fatalf("ranks %d and %d have one address", q, (q+1)%n)
		}
	}
}
