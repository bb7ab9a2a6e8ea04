package tcp

import (
	"context"
	"testing"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

func TestPostWriteDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	a, _, devA, devB := pair(t, rdma.Config{})
	src := make([]byte, 4096)
	sMR := mustReg(t, devA, src, 0)
	dst := make([]byte, 4096)
	dMR := mustReg(t, devB, dst, rdma.AccessRemoteWrite)
	ctx := context.Background()
	step := func() {
		if err := a.PostWrite(1, src, sMR, rdma.FlagSignaled, dMR.Addr(), dMR.RKey()); err != nil {
			t.Fatal(err)
		}
		if _, err := a.GetSendComp(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for range 100 { // warm up slots, queues and buffers
		step()
	}
	if n := testing.AllocsPerRun(1000, step); n > 0 {
		t.Fatalf("PostWrite+GetSendComp allocates %v times per request", n)
	}
}
