package rdma

import (
	"context"
	"errors"
	"runtime"
	"testing"
)

func TestDeregisterWaitForLastUser(t *testing.T) {
	released := 0
	m := NewMR(make([]byte, 64), AccessLocalWrite, 1, 2, nil, func(*MR) error { released++; return nil })
	for range 2 {
		if !m.Acquire() {
			t.Fatal("Acquire of a valid region failed")
		}
	}
	done := make(chan error, 1)
	go func() { done <- m.DeregisterWait(context.Background()) }()
	for m.Valid() { // DeregisterWait has not started draining yet
		runtime.Gosched()
	}
	if m.Acquire() {
		t.Fatal("Acquire of a draining region succeeded")
	}
	m.Release()
	select {
	case err := <-done:
		t.Fatalf("DeregisterWait returned %v with a user left", err)
	default:
	}
	if released != 0 {
		t.Fatal("released with a user left")
	}
	m.Release()
	if err := <-done; err != nil {
		t.Fatalf("DeregisterWait: %v", err)
	}
	if released != 1 {
		t.Fatalf("release ran %d times, want 1", released)
	}
	if err := m.Deregister(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Deregister after DeregisterWait: %v, want ErrClosed", err)
	}
}

func TestDeregisterWaitContextEnds(t *testing.T) {
	m := NewMR(make([]byte, 64), AccessLocalWrite, 1, 2, nil, nil)
	if !m.Acquire() {
		t.Fatal("Acquire failed")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := m.DeregisterWait(ctx); !errors.Is(err, ErrBusy) || !errors.Is(err, context.Canceled) {
		t.Fatalf("DeregisterWait with an ended context: %v, want ErrBusy and context.Canceled", err)
	}
	if !m.Valid() {
		t.Fatal("the region is no longer valid after a DeregisterWait that gave up")
	}
	m.Release()
	if err := m.DeregisterWait(context.Background()); err != nil {
		t.Fatalf("DeregisterWait of an unused region: %v", err)
	}
}
