//go:build linux && cgo && rdma

package verbs

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// pingPongSeconds is how long each mode runs per round.
const pingPongSeconds = 1

// pingPong bounces an 8-byte write-with-immediate between two connections
// for pingPongSeconds and returns the median round trip. wait returns the
// next receive completion of one side (the sends are unsignaled).
func pingPong(t *testing.T, d rdma.Device, a, b rdma.Conn, waitA, waitB func(context.Context) (rdma.WC, error)) time.Duration {
	t.Helper()
	src, _ := d.Alloc(64, rdma.AccessLocalWrite)
	dst, _ := d.Alloc(64, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// b echoes until ctx ends
	errc := make(chan error, 1)
	go func() {
		errc <- func() error {
			for {
				wc, err := waitB(ctx)
				if err != nil {
					return nil
				}
				if wc.Status != rdma.StatusSuccess || !wc.HasImm {
					return fmt.Errorf("b: %+v", wc)
				}
				if err := b.PostRecv(0, nil, nil); err != nil {
					return err
				}
				if err := b.PostWriteImm(0, src.Bytes()[8:16], src, 0, dst.Addr()+8, dst.RKey(), wc.Imm); err != nil {
					return err
				}
			}
		}()
	}()
	for _, c := range []rdma.Conn{a, b} {
		if err := c.PostRecv(0, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	var rtts []time.Duration
	end := time.Now().Add(pingPongSeconds * time.Second)
	for i := uint32(0); time.Now().Before(end); i++ {
		t0 := time.Now()
		if err := a.PostWriteImm(0, src.Bytes()[:8], src, 0, dst.Addr(), dst.RKey(), i); err != nil {
			t.Fatal(err)
		}
		wc, err := waitA(ctx)
		if err != nil || wc.Status != rdma.StatusSuccess || wc.Imm != i {
			t.Fatalf("a: %+v %v", wc, err)
		}
		rtts = append(rtts, time.Since(t0))
		if err := a.PostRecv(0, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	sort.Slice(rtts, func(i, j int) bool { return rtts[i] < rtts[j] })
	return rtts[len(rtts)/2]
}

// spin polls cq until it has a completion (what collectives' engine does
// while it spins), with sched_yield between empty polls if yield is set
// (what it does when ranks outnumber CPUs).
func spin(cq rdma.CQ, yield bool) func(context.Context) (rdma.WC, error) {
	var wc [1]rdma.WC
	return func(ctx context.Context) (rdma.WC, error) {
		for ctx.Err() == nil {
			if cq.Poll(wc[:]) == 1 {
				return wc[0], nil
			}
			if yield {
				syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
			}
		}
		return rdma.WC{}, ctx.Err()
	}
}

// spinWait polls cq spinPolls times (yielding the goroutine in between),
// as GetRecvComp does on a private CQ, then sleeps in rdma.WaitComp.
func spinWait(cq rdma.CQ) func(context.Context) (rdma.WC, error) {
	var wc [1]rdma.WC
	return func(ctx context.Context) (rdma.WC, error) {
		for i := 0; i < spinPolls; i++ {
			if cq.Poll(wc[:]) == 1 {
				return wc[0], nil
			}
			runtime.Gosched()
		}
		return rdma.WaitComp(ctx, cq, nil)
	}
}

// TestPingPongLatency compares the round trip of an 8-byte write with
// immediate between two connections (both in this process, over rxe0)
// when each side waits for its receive on a shared CQ by: spinning on Poll
// (with and without sched_yield between empty polls); polling as
// GetRecvComp does, then sleeping in rdma.WaitComp (Arm, Notify);
// WaitComp at once; or GetRecvComp on a private CQ. Under TCG the figures
// are only relative.
func TestPingPongLatency(t *testing.T) {
	vmIP(t)
	if testing.Short() && os.Getenv("GORUN_VERBS_BW") == "" {
		t.Skip("takes ~20 s: set GORUN_VERBS_BW=1 (scripts/rxe-vm/test.sh -bench does) or drop -short")
	}
	d := openDev(t, rdma.Config{})
	ca, cb := newCQ(t, d, 0), newCQ(t, d, 0)
	sa, sb := pairQP(t, d, d, both(ca), both(cb))
	pa, pb := pair(t, d)
	modes := []struct {
		name         string
		a, b         rdma.Conn
		waitA, waitB func(context.Context) (rdma.WC, error)
	}{
		{"cq-poll", sa, sb, spin(ca, false), spin(cb, false)},
		{"cq-poll+yield", sa, sb, spin(ca, true), spin(cb, true)},
		{"cq-spin+waitcomp", sa, sb, spinWait(ca), spinWait(cb)},
		{"cq-waitcomp", sa, sb, func(ctx context.Context) (rdma.WC, error) { return rdma.WaitComp(ctx, ca, nil) },
			func(ctx context.Context) (rdma.WC, error) { return rdma.WaitComp(ctx, cb, nil) }},
		{"getrecvcomp", pa, pb, pa.GetRecvComp, pb.GetRecvComp},
	}
	med := make([][]time.Duration, len(modes))
	for round := 0; round < 3; round++ { // interleaved: the host is noisy
		for i, m := range modes {
			med[i] = append(med[i], pingPong(t, d, m.a, m.b, m.waitA, m.waitB))
		}
	}
	var parts []string
	for i, m := range modes {
		parts = append(parts, fmt.Sprintf("%s %v", m.name, med[i]))
	}
	line := "LATENCY 8-byte write-with-imm round trip, median per 1 s round, rxe0 under qemu: " + strings.Join(parts, ", ")
	t.Log(line)
	fmt.Println(line)
}
