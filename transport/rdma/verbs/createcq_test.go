//go:build linux && cgo && rdma

package verbs

import (
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// heldDepth is a CQ depth no other test asks for: the hooks hold only the
// CreateCQ that asks for it.
const heldDepth = 77

// holdCreateCQ makes *hook stop a CreateCQ(depth) until release.
func holdCreateCQ(t *testing.T, hook *func(int), depth int) (entered chan struct{}, release func()) {
	entered, held := make(chan struct{}), make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(held) }) }
	*hook = func(n int) {
		if n == depth {
			close(entered)
			<-held
		}
	}
	t.Cleanup(func() { release(); *hook = nil }) // before openDev's Close
	return entered, release
}

// TestCreateCQDoesNotBlock: while a CreateCQ is inside ibv_create_cq
// (stopped there by testHookCreateCQ), a registration and its
// deregistration, another CQ's creation and close, and a connection's
// setup and teardown all complete. CreateCQ held the device's lock
// across ibv_create_cq, as register once held it across ibv_reg_mr.
func TestCreateCQDoesNotBlock(t *testing.T) {
	d := openDev(t, rdma.Config{})
	ip := vmIP(t)
	entered, release := holdCreateCQ(t, &testHookCreateCQ, heldDepth)
	heldDone := make(chan error, 1)
	go func() {
		cq, err := d.CreateCQ(heldDepth)
		if err == nil {
			err = cq.Close()
		}
		heldDone <- err
	}()
	<-entered
	othersGoOn(t, d, ip, "a CQ creation")
	select {
	case err := <-heldDone:
		t.Fatalf("the held CreateCQ ended early: %v", err)
	default:
	}
	release()
	if err := <-heldDone; err != nil {
		t.Fatal("the held CreateCQ:", err)
	}
}

// TestCloseDuringCreateCQ: Device.Close while a CreateCQ is between
// ibv_create_cq and publishing its CQ (stopped there by
// testHookCQCreated) waits for it; the CreateCQ fails with ErrClosed,
// its CQ destroyed, and Close returns without error. Run it with -race.
func TestCloseDuringCreateCQ(t *testing.T) {
	d := openDev(t, rdma.Config{})
	entered, release := holdCreateCQ(t, &testHookCQCreated, heldDepth)
	type result struct {
		cq  rdma.CQ
		err error
	}
	createDone := make(chan result, 1)
	go func() {
		cq, err := d.CreateCQ(heldDepth)
		createDone <- result{cq, err}
	}()
	<-entered
	closeDone := make(chan error, 1)
	go func() { closeDone <- d.Close() }()
	// Close has begun once a registration fails with ErrClosed.
	closing := make(chan error, 1)
	go func() {
		for {
			mr, err := d.Register(make([]byte, 64), rdma.AccessLocalWrite)
			if errors.Is(err, rdma.ErrClosed) {
				closing <- nil
				return
			}
			if err != nil {
				closing <- err
				return
			}
			_ = mr.Deregister() // Close may have taken it already
			runtime.Gosched()
		}
	}()
	select {
	case err := <-closing:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second): // a bound for a hang, not a measure
		t.Fatal("Close did not begin while a CQ creation was in progress")
	}
	select {
	case err := <-closeDone:
		t.Errorf("Close returned (%v) during a CQ creation", err)
		closeDone <- err
	default:
	}
	release()
	r := <-createDone
	if r.cq != nil || !errors.Is(r.err, rdma.ErrClosed) {
		t.Errorf("CQ creation overtaken by Close: CQ %v, %v; want ErrClosed", r.cq, r.err)
	}
	if err := <-closeDone; err != nil {
		t.Errorf("Close: %v", err)
	}
	if r.cq != nil {
		q := r.cq.(*cq)
		q.mu.Lock()
		hw := q.hw
		q.mu.Unlock()
		if hw != nil {
			t.Error("the CQ is not destroyed after Close")
		}
	}
}
