package mem_test

import (
	"context"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// A refused remote access is counted once, on the target's device.
func TestCounters(t *testing.T) {
	for _, tc := range []struct {
		name string
		acc  rdma.Access
		post func(a rdma.Conn, src, dst *rdma.MR) error
	}{
		{"write-bad-rkey", rdma.AccessRemoteWrite, func(a rdma.Conn, src, dst *rdma.MR) error {
			return a.PostWrite(1, src.Bytes(), src, 0, dst.Addr(), dst.RKey()+1)
		}},
		{"write-out-of-bounds", rdma.AccessRemoteWrite, func(a rdma.Conn, src, dst *rdma.MR) error {
			return a.PostWrite(1, src.Bytes(), src, 0, dst.Addr()+1, dst.RKey())
		}},
		{"read-not-granted", rdma.AccessRemoteWrite, func(a rdma.Conn, src, dst *rdma.MR) error {
			return a.PostRead(1, src.Bytes(), src, 0, dst.Addr(), dst.RKey())
		}},
		{"write-imm-not-granted", rdma.AccessRemoteRead, func(a rdma.Conn, src, dst *rdma.MR) error {
			return a.PostWriteImm(1, src.Bytes(), src, 0, dst.Addr(), dst.RKey(), 7)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b, devA, devB := pair(t, rdma.Config{})
			src, err := devA.Register(make([]byte, 64), rdma.AccessLocalWrite)
			if err != nil {
				t.Fatal(err)
			}
			dst, err := devB.Register(make([]byte, 64), tc.acc)
			if err != nil {
				t.Fatal(err)
			}
			rb, err := devB.Register(make([]byte, 64), rdma.AccessLocalWrite)
			if err != nil {
				t.Fatal(err)
			}
			if err := b.PostRecv(9, rb.Bytes(), rb); err != nil { // for the write with immediate
				t.Fatal(err)
			}
			// The second bad request finds the connection in the error
			// state and is flushed, not counted again.
			for range 2 {
				if err := tc.post(a, src, dst); err != nil {
					t.Fatal(err)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			wc, err := a.GetSendComp(ctx)
			if err != nil || wc.Status != rdma.StatusRemoteAccessError {
				t.Fatalf("first completion %+v, %v", wc, err)
			}
			wc, err = a.GetSendComp(ctx)
			if err != nil || wc.Status == rdma.StatusSuccess {
				t.Fatalf("second completion %+v, %v", wc, err)
			}
			cs := func(d rdma.Device) rdma.Counters { return d.(rdma.CounterSource).Counters() }
			if got := cs(devB); got != (rdma.Counters{AccessViolations: 1}) {
				t.Fatalf("target counters %+v", got)
			}
			if got := cs(devA); got != (rdma.Counters{}) {
				t.Fatalf("initiator counters %+v", got)
			}
		})
	}
}
