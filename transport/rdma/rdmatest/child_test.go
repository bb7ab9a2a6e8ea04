package rdmatest

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// TestChildProcess starts a real conformance child (mem cannot connect to
// it, so only the device-side operations are driven), checks that errors
// cross the process boundary with their sentinels, and that the child
// exits cleanly when the parent ends the session.
func TestChildProcess(t *testing.T) {
	rp, err := startChild("mem")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if rp != nil {
			rp.shutdown()
		}
	}()
	addr, err := rp.Listen(rdma.Config{}, "127.0.0.1:0")
	if err != nil || addr == "" {
		t.Fatalf("listen in the child: %q %v", addr, err)
	}
	b, err := rp.Buf(10000, rdma.AccessLocalWrite|rdma.AccessRemoteRead, false)
	if err != nil || b.Len != 10000 || b.Addr == 0 {
		t.Fatalf("buf: %+v %v", b, err)
	}
	if err := rp.Fill(b, 100, 5000, 77); err != nil {
		t.Fatal(err)
	}
	sum, err := rp.Sum(b, 100, 5000)
	if err != nil || sum != checksum(pattern(5000, 77)) {
		t.Fatalf("sum %#x %v, want %#x", sum, err, checksum(pattern(5000, 77)))
	}
	got, err := rp.Read(b, 100, 64)
	if err != nil || !bytes.Equal(got, pattern(64, 77)) {
		t.Fatalf("read: %x %v", got, err)
	}
	if _, err := rp.Sum(b, 9999, 2); !errors.Is(err, rdma.ErrInvalid) {
		t.Fatalf("out-of-range sum: %v, want ErrInvalid across the pipe", err)
	}
	if err := rp.PostRecv(1, []seg{{b.ID, 0, 8}}); !errors.Is(err, rdma.ErrNotConnected) {
		t.Fatalf("post_recv before accept: %v, want ErrNotConnected", err)
	}
	if err := rp.Accept(50 * time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("accept with nobody dialing: %v, want deadline exceeded", err)
	}
	if err := rp.Deregister(b); err != nil {
		t.Fatal(err)
	}
	if err := rp.Deregister(b); !errors.Is(err, rdma.ErrInvalid) {
		t.Fatalf("second deregister: %v", err)
	}
	if err := rp.Close(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = rp.shutdown()
	rp = nil
	if err != nil {
		t.Fatalf("child exit: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("child took %v to exit after EOF", d)
	}
}
