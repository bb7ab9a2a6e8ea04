package launcher

import (
	"bytes"
	"errors"
	"syscall"
	"testing"
	"time"
)

// A rank killed by SIGUSR1 and a rank that exits with 138 are told apart
// wherever it runs: here (the wait status says), on a remote host and
// under srun (the wrapper's marker says; a shell's $? is 138 for both).
func TestKilledOrExited(t *testing.T) {
	for _, where := range []string{"local", "remote", "srun"} {
		t.Run(where, func(t *testing.T) {
			host := ""
			cfg := Config{NP: 2, KillGrace: time.Second, UseSrun: "no", Program: "/bin/sh"}
			switch where {
			case "remote":
				host = "node1"
				cfg.Hosts, cfg.LaunchAgent = []Host{{Name: host, Slots: 2}}, fakeSSHAgent(t)
			case "srun":
				fakeSlurm(t)
				cfg.UseSrun = "yes"
			}
			for _, tc := range []struct {
				script string
				sig    syscall.Signal
				code   int // RankError.ExitCode
				status int // gorun's
				say    string
			}{
				{`[ "${GORUN_RANK:-$SLURM_PROCID}" = 1 ] && kill -s USR1 $$; exit 0`, syscall.SIGUSR1, -1, 138, "was killed by signal 10 (user defined signal 1)"},
				{`[ "${GORUN_RANK:-$SLURM_PROCID}" = 1 ] && exit 138; exit 0`, 0, 138, 138, "exited with status 138"},
				{`[ "${GORUN_RANK:-$SLURM_PROCID}" = 1 ] && exit 7; exit 0`, 0, 7, 7, "exited with status 7"},
			} {
				cfg.Args = []string{"-c", tc.script}
				var stdout, stderr bytes.Buffer
				cfg.Stdout, cfg.Stderr = &stdout, &stderr
				err := Run(t.Context(), cfg)
				var re *RankError
				if !errors.As(err, &re) || re.Rank != 1 || re.Host != host || re.Signal != tc.sig || re.ExitCode != tc.code || ExitStatus(err) != tc.status {
					t.Errorf("%s: Run = %v (status %d), want rank 1 on %q, signal %d, exit code %d, status %d\n%s",
						tc.script, err, ExitStatus(err), host, tc.sig, tc.code, tc.status, stderr.String())
					continue
				}
				want := "gorun: rank 1 " + tc.say
				if host != "" {
					want = "gorun: rank 1 (" + host + ") " + tc.say
				}
				if !bytes.Contains(stderr.Bytes(), []byte(want)) || bytes.Contains(stderr.Bytes(), []byte("User defined signal")) {
					t.Errorf("%s: stderr does not say %q, or has the shell's notice:\n%s", tc.script, want, stderr.String())
				}
			}
		})
	}
}
