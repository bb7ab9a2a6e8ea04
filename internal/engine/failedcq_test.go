//go:build linux

package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/internal/devfault"
	"github.com/gorun-hpc/gorun/transport/rdma"
	_ "github.com/gorun-hpc/gorun/transport/rdma/mem"
)

// A CQ that fails (verbs: IBV_EVENT_CQ_ERR, an overrun that lost
// completions) fails the links of its device, whether a Run waits on it or
// the device is idle: a Run that waits for its peer fails at once with an
// error that names this rank and its device and wraps ErrDeviceFailed and
// the CQ's failure, not ErrPeerFailed naming the healthy peer; a later Run
// fails with it too; the peer sees this rank failed (ErrPeerFailed naming
// rank 0); and the device's watcher neither polls nor arms the CQ again;
// a new link on the device is refused with the same error. Before
// 2026-12-03 the Run failed with "rank 1: peer failed: the completion
// queue of device mem failed", and the abort notice told rank 1 that
// rank 1 had failed. Before that, the watcher armed and polled an idle
// failed CQ in a loop (each Arm of a failed CQ sends its token at once),
// and the Run waited until its context ended.
func TestFailedCQFailsLinks(t *testing.T) {
	for _, idle := range []bool{false, true} {
		name := "during a Run"
		if idle {
			name = "between Runs"
		}
		t.Run(name, func(t *testing.T) { testFailedCQ(t, idle) })
	}
}

func testFailedCQ(t *testing.T, idle bool) {
	fd := &devfault.Device{CQs: make(chan *devfault.CQ, 1)}
	e := pairEnginesOn(t, "mem", LinkParams{Slots: 4, SlotBytes: 4096}, func(i int, d rdma.Device) rdma.Device {
		if i == 1 {
			return d
		}
		fd.Device = d
		return fd
	})
	fq := <-fd.CQs
	dev := e[0].devs[0]
	e[0].SetWait(WaitPolicy{}) // no spin: the polls counted are the failure's
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	errCQ := errors.New("the CQ overran (test)")
	gaveUp := func() {
		t.Helper()
		select {
		case <-dev.cqDown:
		case <-ctx.Done():
			t.Fatalf("the device never gave up on its failed CQ (%d polls and arms of it)", fq.After())
		}
	}
	if idle {
		fq.Fail(errCQ)
		gaveUp()
	}
	buf := make([]byte, 64)
	p, c := sendPlan(0, false, len(buf), 0, buf) // rank 1 never sends
	done := make(chan error, 1)
	go func() { done <- e[0].Run(ctx, p, c, 0) }()
	if !idle {
		fq.Fail(errCQ)
	}
	err := <-done
	var pe *PeerError
	if !errors.As(err, &pe) || pe.Rank != 0 || !errors.Is(err, ErrDeviceFailed) || errors.Is(err, ErrPeerFailed) ||
		!errors.Is(err, errCQ) || !strings.Contains(err.Error(), "completion queue of device mem") {
		t.Fatalf("Run = %v; want a *PeerError naming rank 0 (this rank) that wraps ErrDeviceFailed and the CQ's failure, not ErrPeerFailed (%d polls and arms of the failed CQ)", err, fq.After())
	}
	if err := e[0].Run(ctx, p, c, 0); !errors.Is(err, ErrDeviceFailed) || errors.Is(err, ErrPeerFailed) {
		t.Fatalf("a Run after the failure = %v; want ErrDeviceFailed", err)
	}
	// Rank 1 learns that rank 0 failed, from rank 0's abort notice.
	select {
	case <-e[1].Done():
	case <-ctx.Done():
		t.Fatal("rank 1 never learned that rank 0 failed")
	}
	err1 := e[1].Err()
	if !errors.As(err1, &pe) || pe.Rank != 0 || !errors.Is(err1, ErrPeerFailed) || errors.Is(err1, ErrDeviceFailed) ||
		!strings.Contains(err1.Error(), "own device failed") {
		t.Fatalf("rank 1's engine: %v; want ErrPeerFailed naming rank 0, whose device failed", err1)
	}
	t.Logf("rank 1: %v", err1)
	gaveUp()
	n := fq.After()
	if n > 100 {
		t.Fatalf("%d polls and arms of the failed CQ; want a few, not a loop", n)
	}
	t.Logf("Run: %v (%d polls and arms of the failed CQ)", err, n)
	if !errors.Is(dev.Err(), errCQ) || !errors.Is(dev.Err(), ErrDeviceFailed) {
		t.Fatalf("Device.Err = %v, want the CQ's failure, wrapping ErrDeviceFailed", dev.Err())
	}
	select {
	case <-dev.Down():
	default:
		t.Fatal("Device.Down is open after the failure")
	}
	if err := dev.addLink(&Link{}); !errors.Is(err, errCQ) {
		t.Fatalf("a new link on the device: %v, want the CQ's failure", err)
	}
}

// A connection that its transport failed because of this rank's own
// device (Conn.Err wraps rdma.ErrDeviceFailed) fails this rank's Run with
// a *PeerError naming this rank that wraps ErrDeviceFailed, not
// ErrPeerFailed naming the healthy peer (as it did before), and the peer
// hears of this rank's failure.
func TestLocalConnFailureIsThisRanks(t *testing.T) {
	ld := &devfault.Device{}
	e := pairEnginesOn(t, "mem", LinkParams{Slots: 4, SlotBytes: 4096}, func(i int, d rdma.Device) rdma.Device {
		if i == 0 {
			return d
		}
		ld.Device = d
		return ld // its one connection is rank 1's to rank 0
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	buf := make([]byte, 64)
	p, c := sendPlan(1, false, len(buf), 0, buf) // rank 0 never sends
	done := make(chan error, 1)
	go func() { done <- e[1].Run(ctx, p, c, 0) }()
	time.Sleep(50 * time.Millisecond)
	portDown := fmt.Errorf("port 1 stayed down (test): %w", rdma.ErrDeviceFailed)
	ld.Lose(portDown)
	err := <-done
	var pe *PeerError
	if !errors.As(err, &pe) || pe.Rank != 1 || !errors.Is(err, ErrDeviceFailed) || errors.Is(err, ErrPeerFailed) || !errors.Is(err, portDown) {
		t.Fatalf("rank 1's Run = %v; want a *PeerError naming rank 1 that wraps ErrDeviceFailed and the transport's error", err)
	}
	t.Logf("rank 1: %v", err)
	p0, c0 := sendPlan(0, false, len(buf), 0, buf)
	err = e[0].Run(ctx, p0, c0, 0)
	if !errors.As(err, &pe) || pe.Rank != 1 || !errors.Is(err, ErrPeerFailed) {
		t.Fatalf("rank 0's Run = %v; want a *PeerError naming rank 1 that wraps ErrPeerFailed", err)
	}
	t.Logf("rank 0: %v", err)
}
