package comm

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/collectives"
)

// Too many ranks for one process: a clear error at once, nothing started.
func TestBoundsTooManyRanks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := NewLocal(ctx, maxLocalRanks+1)
	if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "at most 4096") {
		t.Fatalf("NewLocal(%d) = %v, want ErrLimit naming the bound", maxLocalRanks+1, err)
	}
}

// A descriptor limit too low for the tcp connections: NewLocal fails at
// once naming RLIMIT_NOFILE and how to raise it (it used to run out of
// descriptors part-way through connecting).
func TestBoundsDescriptors(t *testing.T) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Skip(err)
	}
	const n = 8
	low := rl
	low.Cur = uint64(openFDs() + n*collectives.MaxInitPeers(n)/2)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Skip(err)
	}
	defer syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := NewLocal(ctx, n, WithTransport("tcp"))
	for _, c := range cs {
		c.Close()
	}
	if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "RLIMIT_NOFILE") || !strings.Contains(err.Error(), "ulimit -n") {
		t.Fatalf("NewLocal(%d, tcp) with RLIMIT_NOFILE %d = %v, want ErrLimit naming RLIMIT_NOFILE", n, low.Cur, err)
	}
}

func TestCheckFDs(t *testing.T) {
	if err := checkFDs(100, 4, 10, 1024); err != nil {
		t.Fatal(err)
	}
	if err := checkFDs(1000, 4, 10, 0); err != nil { // unknown limit
		t.Fatal(err)
	}
	if err := checkFDs(1000, 4, 10, 1024); !errors.Is(err, ErrLimit) {
		t.Fatalf("checkFDs = %v", err)
	}
	if err := limitHint(syscall.EMFILE); !errors.Is(err, ErrLimit) || !errors.Is(err, syscall.EMFILE) {
		t.Fatalf("limitHint(EMFILE) = %v", err)
	}
}
