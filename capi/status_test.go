//go:build cgo

package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/gorun-hpc/gorun/comm"
)

// gorun_init's status for a rank gorun restarted whose job's other ranks
// were gone (comm.ErrJobGone, as Init wraps it) is GORUN_ERR_JOB_GONE, with
// gorun.h's value; any other failure to join is GORUN_ERR_INIT.
func TestInitStatusJobGone(t *testing.T) {
	gone := &comm.RankError{Rank: 2, Op: "init", Err: fmt.Errorf("bootstrap: world of 4 not formed: %w", comm.ErrJobGone)}
	if s := initStatus(gone); s != statusJobGone {
		t.Errorf("initStatus(%v) = %d, want %d", gone, s, statusJobGone)
	}
	if s := initStatus(errors.New("gorun: bootstrap: timed out")); s != statusInit {
		t.Errorf("initStatus(other) = %d, want %d", s, statusInit)
	}
	h, err := os.ReadFile("../include/gorun.h")
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("GORUN_ERR_JOB_GONE = %d,", statusJobGone); !strings.Contains(string(h), want) {
		t.Errorf("gorun.h lacks %q", want)
	}
	if statusText[statusJobGone] == "" {
		t.Errorf("no text for status %d", statusJobGone)
	}
}

// A Shrink or Grow without a quorum (comm.ErrNoQuorum, in the RankError
// Shrink returns) is GORUN_ERR_NO_QUORUM, with gorun.h's and Python's
// value, not the GORUN_ERR_PEER of other failed operations.
func TestStatusNoQuorum(t *testing.T) {
	lost := &comm.RankError{Rank: 3, Op: "shrink", Err: fmt.Errorf("%w: 1 of the 4 ranks", comm.ErrNoQuorum)}
	if s := classify(lost); s != statusNoQuorum {
		t.Errorf("classify(%v) = %d, want %d", lost, s, statusNoQuorum)
	}
	if s := classify(&comm.RankError{Rank: 1, Op: "shrink", Err: comm.ErrPeerFailed}); s != statusPeer {
		t.Errorf("classify(peer failed) = %d, want %d", s, statusPeer)
	}
	// This rank's own device (comm.ErrDeviceFailed) is no peer's failure.
	own := &comm.RankError{Rank: 2, Op: "allreduce", Err: fmt.Errorf("%w: the completion queue of device mlx5_0 failed", comm.ErrDeviceFailed)}
	if s := classify(own); s != statusInternal {
		t.Errorf("classify(%v) = %d, want %d (GORUN_ERR_INTERNAL)", own, s, statusInternal)
	}
	h, err := os.ReadFile("../include/gorun.h")
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("GORUN_ERR_NO_QUORUM = %d,", statusNoQuorum); !strings.Contains(string(h), want) {
		t.Errorf("gorun.h lacks %q", want)
	}
	py, err := os.ReadFile("../python/gorun/__init__.py")
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("\nERR_NO_QUORUM = %d\n", statusNoQuorum); !strings.Contains(string(py), want) {
		t.Errorf("python/gorun lacks %q", strings.TrimSpace(want))
	}
}
