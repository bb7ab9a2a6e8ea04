//go:build linux && cgo && rdma

package verbs_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/comm"
)

// TestCommOverVerbs runs collectives of package comm with every rank
// connected to every other over rxe0 (comm.NewLocal with the verbs
// transport: each rank its own device, PD and RC queue pairs).
func TestCommOverVerbs(t *testing.T) {
	transport := "verbs"
	if tr := os.Getenv("GORUN_VERBS_COMM_TRANSPORT"); tr != "" {
		transport = tr // to compare with another provider on any host
	} else if os.Getenv("RXE_VM_IP") == "" {
		t.Skip("RXE_VM_IP not set: run inside the rxe VM (scripts/rxe-vm/test.sh)")
	}
	big := []int{1, 1000, 1 << 18}
	for _, tc := range []struct {
		n      int
		algo   string
		counts []int
	}{
		{2, "allreduce:ring,broadcast:tree,allgather:ring", big},
		{4, "allreduce:ring,broadcast:tree,allgather:ring", big},
		{3, "allreduce:tree,broadcast:chain,allgather:bruck", big},
		{4, "allreduce:rd,broadcast:chain,allgather:bruck", big},
	} {
		t.Run(fmt.Sprintf("n=%d/%s", tc.n, tc.algo), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cs, err := comm.NewLocal(ctx, tc.n, comm.WithTransport(transport), comm.WithAlgorithm(tc.algo))
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				for _, c := range cs {
					c.Close()
				}
			}()
			for _, count := range tc.counts {
				runRanks(t, cs, func(c *comm.Comm) error { return exercise(ctx, c, count) })
			}
		})
	}
}

func runRanks(t *testing.T, cs []*comm.Comm, f func(*comm.Comm) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, len(cs))
	for i, c := range cs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = f(c) }()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", i, err)
		}
	}
}

// exercise checks allreduce (sum), broadcast and allgather of count
// elements on one rank, and a barrier.
func exercise(ctx context.Context, c *comm.Comm, count int) error {
	r, n := c.Rank(), c.Size()
	buf := make([]float32, count)
	for i := range buf {
		buf[i] = float32(r + i%7)
	}
	if err := comm.AllReduce(ctx, c, buf, buf, comm.Sum); err != nil {
		return fmt.Errorf("allreduce %d: %w", count, err)
	}
	for i, v := range buf {
		if want := float32(n*(n-1)/2 + n*(i%7)); v != want {
			return fmt.Errorf("allreduce %d: [%d] = %v, want %v", count, i, v, want)
		}
	}
	b := make([]int64, count)
	if r == n-1 {
		for i := range b {
			b[i] = int64(i) * 3
		}
	}
	if err := comm.Broadcast(ctx, c, b, n-1); err != nil {
		return fmt.Errorf("broadcast %d: %w", count, err)
	}
	for i, v := range b {
		if v != int64(i)*3 {
			return fmt.Errorf("broadcast %d: [%d] = %d", count, i, v)
		}
	}
	send := make([]int32, min(count, 4096))
	for i := range send {
		send[i] = int32(r*100000 + i)
	}
	recv := make([]int32, n*len(send))
	if err := comm.AllGather(ctx, c, send, recv); err != nil {
		return fmt.Errorf("allgather %d: %w", len(send), err)
	}
	for q := 0; q < n; q++ {
		for i := range send {
			if got := recv[q*len(send)+i]; got != int32(q*100000+i) {
				return fmt.Errorf("allgather %d: rank %d [%d] = %d", len(send), q, i, got)
			}
		}
	}
	return c.Barrier(ctx)
}
