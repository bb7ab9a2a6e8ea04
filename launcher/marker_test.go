package launcher

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
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

// A wrapper's exit or signal marker follows the rank's output on its
// stderr, so after a last line without a newline it comes on that line:
// gorun still reads it (a killed rank was reported as "exited with status
// 139", from ssh's status), and neither the console nor --output-filename
// shows it ("[1] partial 1\x1egorun:signal 11").
func TestMarkerAfterLineWithoutNewline(t *testing.T) {
	for _, where := range []string{"local", "remote", "srun"} {
		t.Run(where, func(t *testing.T) {
			host := ""
			dir := t.TempDir()
			logs := filepath.Join(dir, "logs")
			// Rank 1 writes and dies once rank 0 has written, so that
			// gorun's SIGTERM cannot come first (and the fake srun's
			// shared stderr has rank 1's line last).
			script := `r=${GORUN_RANK:-$SLURM_PROCID}; ` +
				`if [ $r = 1 ]; then while [ ! -e ` + dir + `/written ]; do sleep 0.01; done; fi; ` +
				`printf 'out %s' $r; printf 'partial %s' $r >&2; ` +
				`if [ $r = 0 ]; then touch ` + dir + `/written; exit 0; fi; kill -s SEGV $$`
			cfg := Config{NP: 2, KillGrace: time.Second, UseSrun: "no", Program: "/bin/sh", OutputDir: logs, Args: []string{"-c", script}}
			switch where {
			case "remote":
				host = "node1"
				cfg.Hosts, cfg.LaunchAgent = []Host{{Name: host, Slots: 2}}, fakeSSHAgent(t)
			case "srun":
				fakeSlurm(t)
				cfg.UseSrun = "yes"
			}
			var stdout, stderr bytes.Buffer
			cfg.Stdout, cfg.Stderr = &stdout, &stderr
			err := Run(t.Context(), cfg)
			var re *RankError
			if !errors.As(err, &re) || re.Rank != 1 || re.Signal != syscall.SIGSEGV || ExitStatus(err) != 139 {
				t.Fatalf("Run = %v (status %d), want rank 1 killed by signal 11, 139\n%s", err, ExitStatus(err), stderr.String())
			}
			want := "gorun: rank 1 was killed by signal 11"
			if host != "" {
				want = "gorun: rank 1 (" + host + ") was killed by signal 11"
			}
			if !strings.Contains(stderr.String(), want) || strings.Contains(stderr.String(), "\x1e") ||
				!strings.Contains(stderr.String(), "partial 1\n") {
				t.Errorf("stderr does not say %q and \"partial 1\", or shows a marker:\n%q", want, stderr.String())
			}
			// Nor what is left of a line once its marker is taken off: the
			// label of srun's "0: \x1egorun:step 4242.0".
			if empty := regexp.MustCompile(`(?m)^(\[\d+\] |\d+: )?$`); empty.MatchString(strings.TrimSuffix(stderr.String(), "\n")) {
				t.Errorf("stderr has an empty line:\n%q", stderr.String())
			}
			nl := "" // the files have what the ranks wrote
			if where == "srun" {
				nl = "\n" // what srun's labelled lines say (marker.go)
			}
			for r := range 2 {
				for name, want := range map[string]string{"stdout": fmt.Sprintf("out %d", r) + nl, "stderr": fmt.Sprintf("partial %d", r) + nl} {
					b, err := os.ReadFile(filepath.Join(logs, fmt.Sprintf("rank.%d", r), name))
					if err != nil || string(b) != want {
						t.Errorf("rank.%d/%s = %q (%v), want %q, as the rank wrote it", r, name, b, err, want)
					}
				}
			}
		})
	}
}

// A marker after a last line that fills gorun's 64 KiB line buffer is
// not cut in two where the line is.
func TestMarkerAtLineLimit(t *testing.T) {
	for _, n := range []int{maxLine - 3, maxLine - 1, maxLine, maxLine + 5} {
		var out, file bytes.Buffer
		con := &console{stdout: &out, stderr: &out}
		w := newRankWriter(con, &out, 1, true)
		rr := &remoteRank{}
		w.tap, w.file = rr.tap, &file
		text := bytes.Repeat([]byte("x"), n)
		all := append(append([]byte(nil), text...), marker+"signal 11\n"...)
		for len(all) > 0 { // as a pipe delivers it
			k := min(len(all), 4096)
			w.Write(all[:k])
			all = all[k:]
		}
		w.Flush()
		re, ok := rr.failure(&proc{rank: 1, cmd: &exec.Cmd{}})
		if !ok || re == nil || re.Signal != syscall.SIGSEGV {
			t.Errorf("%d bytes, then the marker: failure = %v, %v; want signal 11", n, re, ok)
		}
		if bytes.Contains(out.Bytes(), []byte(marker)) || bytes.Count(out.Bytes(), []byte("x")) != n {
			t.Errorf("%d bytes, then the marker: the console has the marker or lost output (%d x)", n, bytes.Count(out.Bytes(), []byte("x")))
		}
		if !bytes.Equal(file.Bytes(), text) {
			t.Errorf("%d bytes, then the marker: the file has %d bytes, want the %d the rank wrote", n, file.Len(), n)
		}
	}
}
