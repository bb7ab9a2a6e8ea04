package comm

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/internal/devfault"
	"github.com/gorun-hpc/gorun/transport/rdma"
)

// failingDevices makes the devices that rank opens from now until the
// test ends devfault.Devices (their CQs failed from the start with failed,
// if not nil), through the GORUN_FAULT hook (withFault, which takes the
// "faulty" wrapper: comm's test binary has none of its own); their CQs
// come on the channel returned.
func failingDevices(t *testing.T, rank int, failed error) <-chan *devfault.CQ {
	cqs, _ := failingDevs(t, rank, failed)
	return cqs
}

// failingDevs is failingDevices that also sends the devices made.
func failingDevs(t *testing.T, rank int, failed error) (<-chan *devfault.CQ, <-chan *devfault.Device) {
	if rdma.LookupWrapper("faulty") != nil {
		t.Skip("faulty is linked into this binary")
	}
	cqs := make(chan *devfault.CQ, 4)
	devs := make(chan *devfault.Device, 4)
	rdma.RegisterWrapper("faulty", func(dev rdma.Device, spec string, r int) (rdma.Device, error) {
		if r != rank {
			return dev, nil
		}
		d := &devfault.Device{Device: dev, CQs: cqs, Failed: failed}
		devs <- d
		return d, nil
	})
	old := osGetenv
	osGetenv = func(k string) string {
		if k == envFault {
			return "fail the CQ (test)"
		}
		return old(k)
	}
	t.Cleanup(func() {
		osGetenv = old
		rdma.RegisterWrapper("faulty", nil)
	})
	return cqs, devs
}

// checkOwnDevice fails t unless err is rank's own device failure: a
// *RankError naming rank that wraps ErrDeviceFailed and cause, names the
// device, and is not ErrPeerFailed.
func checkOwnDevice(t *testing.T, what string, err error, rank int, cause error) {
	t.Helper()
	var re *RankError
	if !errors.As(err, &re) || re.Rank != rank || !errors.Is(err, ErrDeviceFailed) || !errors.Is(err, cause) ||
		errors.Is(err, ErrPeerFailed) || !strings.Contains(err.Error(), "completion queue of device") {
		t.Fatalf("%s: %v; want a *RankError naming rank %d (this rank) that wraps ErrDeviceFailed and the CQ's failure, not ErrPeerFailed", what, err, rank)
	}
}

// checkPeerFailed fails t unless err is ErrPeerFailed naming rank, whose
// device failed.
func checkPeerFailed(t *testing.T, what string, err error, rank int) {
	t.Helper()
	var re *RankError
	if !errors.As(err, &re) || re.Rank != rank || !errors.Is(err, ErrPeerFailed) || errors.Is(err, ErrDeviceFailed) ||
		!strings.Contains(err.Error(), "own device failed") {
		t.Fatalf("%s: %v; want ErrPeerFailed naming rank %d, whose device failed", what, err, rank)
	}
}

// When rank 0's device fails (its completion queue: verbs'
// IBV_EVENT_CQ_ERR), rank 0's operations, the one pending (non-blocking)
// and later ones, fail with ErrDeviceFailed naming rank 0 and its device,
// counted as device_failed; its peers' fail with ErrPeerFailed naming rank
// 0. Before 2026-12-03 rank 0's failed with "rank 1 (or 2): peer failed:
// the completion queue of device mem failed", blaming a healthy peer, and
// its abort notice told the others so too.
func TestDeviceFailureIsThisRanks(t *testing.T) {
	cqs := failingDevices(t, 0, nil)
	cs := newLocal(t, 3, WithTimeout(30*time.Second))
	cq := <-cqs
	ctx := testCtx(t)
	buf := make([]float32, 1024)
	req := IAllReduce(ctx, cs[0], buf, buf, Sum) // ranks 1 and 2 do not join it yet
	cause := errors.New("the CQ overran (test)")
	cq.Fail(cause)
	err := req.Wait(ctx)
	checkOwnDevice(t, "rank 0's pending IAllReduce", err, 0, cause)
	t.Logf("rank 0: %v", err)
	if k := errKinds[classify(err)]; k != "device_failed" {
		t.Errorf("the metrics count it as %s, want device_failed", k)
	}
	checkOwnDevice(t, "rank 0's next AllReduce", AllReduce(ctx, cs[0], buf, buf, Sum), 0, cause)
	for r := 1; r < 3; r++ {
		err := AllReduce(ctx, cs[r], make([]float32, 1024), make([]float32, 1024), Sum)
		checkPeerFailed(t, fmt.Sprintf("rank %d's AllReduce", r), err, 0)
		t.Logf("rank %d: %v", r, err)
	}
}

// A rank whose device failed cannot go on: its Shrink fails at once with
// ErrDeviceFailed naming it ("this rank cannot continue"), and it leaves
// the job's group, so that the other ranks shrink without it, not without
// a healthy peer, and carry on. Before 2026-12-03 its Shrink suspected
// the peer its error named, agreed on a world with it, failed to connect
// over the failed device, and suspected every rank in turn.
func TestShrinkAfterOwnDeviceFailed(t *testing.T) {
	cqs := failingDevices(t, 0, nil)
	cs, errs, _ := initRanks(t, 3, func(int) []Option { return nil })
	mustAll(t, "init", errs)
	var cq *devfault.CQ
	select {
	case cq = <-cqs:
	default:
		t.Fatal("rank 0 opened no device through the hook")
	}
	ctx, cancel := context.WithTimeout(initTestCtx(t), 60*time.Second)
	defer cancel()
	cause := errors.New("the CQ overran (test)")
	cq.Fail(cause)
	buf := make([]float64, 64)
	checkOwnDevice(t, "rank 0's AllReduce", AllReduce(ctx, cs[0], buf, buf, Sum), 0, cause)
	start := time.Now()
	sub, err := cs[0].Shrink(ctx)
	if sub != nil {
		sub.Close()
		t.Fatalf("rank 0 shrank to rank %d of %d", sub.Rank(), sub.Size())
	}
	checkOwnDevice(t, "rank 0's Shrink", err, 0, cause)
	if !strings.Contains(err.Error(), "cannot continue") {
		t.Fatalf("rank 0's Shrink: %v; want it to say that this rank cannot continue", err)
	}
	t.Logf("rank 0's Shrink, after %v: %v", time.Since(start).Round(time.Millisecond), err)

	subs := make([]*Comm, 3)
	mustAll(t, "the survivors", onAll(cs[1:], func(c *Comm) error {
		r := c.Rank()
		err := AllReduce(ctx, c, make([]float64, 64), make([]float64, 64), Sum)
		var re *RankError
		if !errors.As(err, &re) || re.Rank != 0 || !errors.Is(err, ErrPeerFailed) {
			return fmt.Errorf("AllReduce: %v; want ErrPeerFailed naming rank 0", err)
		}
		if subs[r], err = c.Shrink(ctx); err != nil {
			return err
		}
		defer subs[r].Close()
		if subs[r].Size() != 2 || subs[r].Rank() != r-1 {
			return fmt.Errorf("shrank to rank %d of %d, want %d of 2", subs[r].Rank(), subs[r].Size(), r-1)
		}
		x := []float64{1}
		if err := AllReduce(ctx, subs[r], x, x, Sum); err != nil || x[0] != 2 {
			return fmt.Errorf("AllReduce after Shrink: %v (sum %v, want 2)", err, x[0])
		}
		return nil
	}))
}

// A rank whose device has failed before it connects (Init: it waits for
// rank 0 to dial it) fails Init at once with ErrDeviceFailed naming
// itself and the device, rather than waiting for a connection that its
// device refuses; rank 0's Init fails naming rank 1. Before 2026-12-03
// comm ignored the device's failure: rank 1 refused the connection in its
// accept loop, which told nobody, and waited until the bootstrap reported
// rank 0's failed Init, whose error then named rank 0.
func TestConnectOnFailedDevice(t *testing.T) {
	cause := errors.New("the CQ overran (test)")
	failingDevices(t, 1, cause)
	start := time.Now()
	_, errs, _ := initRanks(t, 2, func(int) []Option { return nil })
	t.Logf("Init: %v (after %v)", errs, time.Since(start).Round(time.Millisecond))
	checkOwnDevice(t, "rank 1's Init", errs[1], 1, cause)
	var re *RankError
	if !errors.As(errs[0], &re) || re.Rank != 1 {
		t.Fatalf("rank 0's Init: %v; want an error naming rank 1", errs[0])
	}
}

// A rank whose connections its transport failed for its own device (a
// verbs port that stayed down: Conn.Err wraps rdma.ErrDeviceFailed; its
// CQ is fine) fails its operations with ErrDeviceFailed naming itself,
// and its Shrink says it cannot continue, as for a failed CQ above; the
// others shrink without it. Before, its AllReduce blamed a healthy peer
// (ErrPeerFailed), and its Shrink went on to agree on a world without
// that peer.
func TestShrinkAfterOwnPortDown(t *testing.T) {
	_, devs := failingDevs(t, 0, nil)
	cs, errs, _ := initRanks(t, 3, func(int) []Option { return nil })
	mustAll(t, "init", errs)
	var d *devfault.Device
	select {
	case d = <-devs:
	default:
		t.Fatal("rank 0 opened no device through the hook")
	}
	ctx, cancel := context.WithTimeout(initTestCtx(t), 60*time.Second)
	defer cancel()
	down := fmt.Errorf("port 1 stayed down (test): %w", rdma.ErrDeviceFailed)
	buf := make([]float64, 64)
	done := make(chan error, 1)
	go func() { done <- AllReduce(ctx, cs[0], buf, buf, Sum) }() // the others do not join it
	time.Sleep(100 * time.Millisecond)
	d.Lose(down)
	own := func(what string, err error) {
		t.Helper()
		var re *RankError
		if !errors.As(err, &re) || re.Rank != 0 || !errors.Is(err, ErrDeviceFailed) || !errors.Is(err, down) || errors.Is(err, ErrPeerFailed) {
			t.Fatalf("%s: %v; want a *RankError naming rank 0 that wraps ErrDeviceFailed and the port's failure, not ErrPeerFailed", what, err)
		}
	}
	own("rank 0's AllReduce", <-done)
	sub, err := cs[0].Shrink(ctx)
	if sub != nil {
		sub.Close()
		t.Fatalf("rank 0 shrank to rank %d of %d", sub.Rank(), sub.Size())
	}
	own("rank 0's Shrink", err)
	if !strings.Contains(err.Error(), "cannot continue") {
		t.Fatalf("rank 0's Shrink: %v; want it to say that this rank cannot continue", err)
	}
	t.Logf("rank 0's Shrink: %v", err)
	mustAll(t, "the survivors", onAll(cs[1:], func(c *Comm) error {
		sub, err := c.Shrink(ctx)
		if err != nil {
			return err
		}
		defer sub.Close()
		x := []float64{1}
		if err := AllReduce(ctx, sub, x, x, Sum); err != nil || sub.Size() != 2 || x[0] != 2 {
			return fmt.Errorf("after Shrink to %d ranks: AllReduce %v, sum %v (want 2 ranks, sum 2)", sub.Size(), err, x[0])
		}
		return nil
	}))
}
