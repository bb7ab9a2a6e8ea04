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
