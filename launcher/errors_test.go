package launcher

import (
	"errors"
	"fmt"
	"syscall"
	"testing"
)

func TestExitStatusAndMessages(t *testing.T) {
	for _, tc := range []struct {
		err    error
		status int
		msg    string
	}{
		{nil, 0, ""},
		{&RankError{Rank: 3, Host: "n2", ExitCode: 7, Err: ErrRankFailed}, 7, "rank 3 (n2) exited with status 7"},
		{&RankError{Rank: 1, ExitCode: -1, Signal: syscall.SIGKILL, Err: ErrRankFailed}, 137, "rank 1 was killed by signal 9 (killed)"},
		{&RankError{Rank: 0, ExitCode: -1, Err: fmt.Errorf("%w: no such file", ErrLaunch)}, 1, "rank 0: cannot start rank: no such file"},
		{&JobError{Err: ErrTimeout, Detail: " after 1m0s", Status: 124}, 124, "job timed out after 1m0s"},
		{&JobError{Err: ErrInterrupted, Detail: " by interrupt", Status: 130}, 130, "job interrupted by interrupt"},
		{fmt.Errorf("%w: bad", ErrUsage), 2, "invalid job description: bad"},
		{fmt.Errorf("%w: line 1: bad", ErrHostfile), 2, "invalid hostfile: line 1: bad"},
		{fmt.Errorf("%w: job control: no port", ErrLaunch), 1, "cannot start rank: job control: no port"},
	} {
		if got := ExitStatus(tc.err); got != tc.status {
			t.Errorf("ExitStatus(%v) = %d, want %d", tc.err, got, tc.status)
		}
		if tc.err != nil && tc.err.Error() != tc.msg {
			t.Errorf("message %q, want %q", tc.err.Error(), tc.msg)
		}
	}
	wrapped := fmt.Errorf("job: %w", &RankError{Rank: 2, ExitCode: 3, Err: ErrRankFailed})
	if ExitStatus(wrapped) != 3 || !errors.Is(wrapped, ErrRankFailed) {
		t.Errorf("wrapped RankError: status %d", ExitStatus(wrapped))
	}
}
