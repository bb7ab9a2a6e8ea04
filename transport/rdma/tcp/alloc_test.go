package tcp

import (
	"context"
	"fmt"
	"testing"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// The hot path allocates nothing per request, on either end: posting,
// framing, serving, acknowledging and completing.
func TestHotPathDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	for _, cfg := range []rdma.Config{{}, {Checksum: true}} {
		t.Run(fmt.Sprintf("checksum=%v", cfg.Checksum), func(t *testing.T) { hotPath(t, cfg) })
	}
}

func hotPath(t *testing.T, cfg rdma.Config) {
	a, b, devA, devB := pair(t, cfg)
	src := make([]byte, 4096)
	sMR := mustReg(t, devA, src, rdma.AccessLocalWrite)
	dst := make([]byte, 4096)
	dMR := mustReg(t, devB, dst, rdma.AccessLocalWrite|rdma.AccessRemoteWrite|rdma.AccessRemoteRead)
	ctx := context.Background()
	check := func(wc rdma.WC, err error) {
		if err != nil || wc.Status != rdma.StatusSuccess {
			t.Fatalf("%+v %v", wc, err)
		}
	}
	for _, tc := range []struct {
		name string
		step func()
	}{
		{"PostWrite", func() {
			if err := a.PostWrite(1, src, sMR, rdma.FlagSignaled, dMR.Addr(), dMR.RKey()); err != nil {
				t.Fatal(err)
			}
			check(a.GetSendComp(ctx))
		}},
		{"PostSend", func() {
			if err := b.PostRecv(2, dst, dMR); err != nil {
				t.Fatal(err)
			}
			if err := a.PostSend(1, src, sMR, rdma.FlagSignaled); err != nil {
				t.Fatal(err)
			}
			check(b.GetRecvComp(ctx))
			check(a.GetSendComp(ctx))
		}},
		{"PostWriteImm", func() {
			if err := b.PostRecv(2, nil, nil); err != nil {
				t.Fatal(err)
			}
			if err := a.PostWriteImm(1, src, sMR, rdma.FlagSignaled, dMR.Addr(), dMR.RKey(), 7); err != nil {
				t.Fatal(err)
			}
			check(b.GetRecvComp(ctx))
			check(a.GetSendComp(ctx))
		}},
		{"PostRead", func() {
			if err := a.PostRead(1, src, sMR, rdma.FlagSignaled, dMR.Addr(), dMR.RKey()); err != nil {
				t.Fatal(err)
			}
			check(a.GetSendComp(ctx))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for range 200 { // warm up rings, queues and pools
				tc.step()
			}
			if n := testing.AllocsPerRun(1000, tc.step); n > 0 {
				t.Fatalf("%s allocates %v times per request", tc.name, n)
			}
		})
	}
}
