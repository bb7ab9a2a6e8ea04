package launcher

import (
	"errors"
	"fmt"
	"syscall"
)

// Sentinel errors; Run's errors wrap one of them, so errors.Is works.
var (
	ErrUsage       = errors.New("invalid job description")
	ErrHostfile    = errors.New("invalid hostfile")
	ErrLaunch      = errors.New("cannot start rank")
	ErrRankFailed  = errors.New("rank failed")
	ErrTimeout     = errors.New("job timed out")
	ErrInterrupted = errors.New("job interrupted")
)

// StatusUsage is gorun's exit status for a usage error, as for a flag that
// does not parse (the flag package's, and mpirun's for a bad option).
const StatusUsage = 2

// RankError says which rank failed and how.
type RankError struct {
	Rank     int
	Host     string
	ExitCode int            // exit status when the rank exited, else -1
	Signal   syscall.Signal // the signal that killed it, when it was killed
	Err      error          // ErrRankFailed, or ErrLaunch with the cause
}

func (e *RankError) Error() string {
	where := fmt.Sprintf("rank %d", e.Rank)
	if e.Host != "" {
		where += " (" + e.Host + ")"
	}
	if e.Signal != 0 || e.ExitCode >= 0 && errors.Is(e.Err, ErrRankFailed) {
		return where + " " + e.how()
	}
	return fmt.Sprintf("%s: %v", where, e.Err)
}

// how is what the rank's process did: "exited with status 3", "was
// killed by signal 9 (killed)", or "failed: " and the error.
func (e *RankError) how() string {
	switch {
	case e.Signal != 0:
		return fmt.Sprintf("was killed by signal %d (%v)", int(e.Signal), e.Signal)
	case e.ExitCode >= 0 && errors.Is(e.Err, ErrRankFailed):
		return fmt.Sprintf("exited with status %d", e.ExitCode)
	default:
		return fmt.Sprintf("failed: %v", e.Err)
	}
}

func (e *RankError) Unwrap() error { return e.Err }

// JobError is an error of the whole job (timeout, interruption) with the
// status gorun should exit with.
type JobError struct {
	Err    error
	Detail string // appended to Err's text, separator included
	Status int
}

func (e *JobError) Error() string {
	return e.Err.Error() + e.Detail
}

func (e *JobError) Unwrap() error { return e.Err }

// ExitStatus is the status gorun exits with for Run's error: 0 for nil, 2
// for a usage error (ErrUsage, ErrHostfile: a bad flag or value, found
// before any rank starts; the status of a flag that does not parse), the
// failed rank's exit status (128+signal when it was killed, as shells do),
// 124 for a timeout (as timeout(1) does), 128+signal when interrupted, and 1
// otherwise.
func ExitStatus(err error) int {
	if err == nil {
		return 0
	}
	if errors.Is(err, ErrUsage) || errors.Is(err, ErrHostfile) {
		return StatusUsage
	}
	var re *RankError
	if errors.As(err, &re) {
		switch {
		case re.Signal != 0:
			return 128 + int(re.Signal)
		case re.ExitCode > 0:
			return re.ExitCode
		}
		return 1
	}
	var je *JobError
	if errors.As(err, &je) && je.Status != 0 {
		return je.Status
	}
	return 1
}
