//go:build linux

package shm

import (
	"context"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

func counters(d rdma.Device) rdma.Counters { return d.(rdma.CounterSource).Counters() }

// A refused remote access is counted once, by the initiator (which made
// the check); a refused handshake by each side that refused it.
func TestCounters(t *testing.T) {
	t.Run("access", func(t *testing.T) {
		a, _, da, db := pair(t, rdma.Config{})
		remote, _ := db.Alloc(4096, rdma.AccessLocalWrite|rdma.AccessRemoteRead)
		local, _ := da.Alloc(4096, rdma.AccessLocalWrite)
		if err := a.PostWrite(1, local.Bytes()[:8], local, 0, remote.Addr(), remote.RKey()); err != nil {
			t.Fatal(err)
		}
		mustWC(t, a.GetSendComp, rdma.WC{WRID: 1, Status: rdma.StatusRemoteAccessError, Opcode: rdma.OpWrite})
		if got := counters(da); got != (rdma.Counters{AccessViolations: 1}) {
			t.Errorf("initiator counters %+v", got)
		}
		if got := counters(db); got != (rdma.Counters{}) {
			t.Errorf("target counters %+v", got)
		}
	})
	t.Run("auth", func(t *testing.T) {
		dl, ln := listenOne(t, rdma.Config{Token: []byte("s3cret")})
		dd, err := rdma.OpenConfig("shm", rdma.Config{Token: []byte("guess")})
		if err != nil {
			t.Fatal(err)
		}
		defer dd.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		if c, err := dd.Dial(ctx, ln.Addr().String()); err == nil {
			c.Close()
		}
		if c, err := ln.Accept(ctx); err == nil {
			c.Close()
		}
		if got := counters(dl).AuthFailures; got != 1 {
			t.Errorf("listener: %d auth failures, want 1", got)
		}
		if got := counters(dd).AuthFailures; got != 1 {
			t.Errorf("dialer: %d auth failures, want 1", got)
		}
	})
}
