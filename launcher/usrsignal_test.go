package launcher

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// waitWriter keeps what is written and wakes waitFor at each write.
type waitWriter struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{}
}

func (w *waitWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if w.changed != nil {
		close(w.changed)
		w.changed = nil
	}
	return len(p), nil
}

func (w *waitWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// waitFor waits until s has been written n times; false when d passed or
// done was closed first.
func (w *waitWriter) waitFor(s string, n int, d time.Duration, done <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		w.mu.Lock()
		if strings.Count(w.buf.String(), s) >= n {
			w.mu.Unlock()
			return true
		}
		if w.changed == nil {
			w.changed = make(chan struct{})
		}
		ch := w.changed
		w.mu.Unlock()
		select {
		case <-ch:
		case <-t.C:
			return false
		case <-done:
			return strings.Count(w.String(), s) >= n
		}
	}
}

// SIGUSR1 and SIGUSR2 given to gorun reach every rank, local and remote
// (through the agent, to the rank's process group there), and the job goes
// on: the ranks handle both and exit 0, and so does the job. The remote
// wrapper's shells survive them (they would be killed, and the rank
// reported killed by signal 10).
func TestUserSignalsForwarded(t *testing.T) {
	for _, tc := range []struct {
		name  string
		hosts []Host
		agent bool
	}{
		{"local", nil, false},
		{"remote", []Host{{Name: "node1", Slots: 3}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{NP: 3, Hosts: tc.hosts}
			if tc.agent {
				cfg.LaunchAgent = fakeSSHAgent(t)
			}
			sigs := make(chan os.Signal, 1)
			stderr := &waitWriter{}
			cfg.Signals, cfg.Stderr = sigs, stderr
			done := make(chan struct{})
			var err error
			go func() {
				defer close(done)
				_, _, err = runJob(t, "usr", cfg)
			}()
			if !stderr.waitFor("] ready\n", 3, time.Minute, done) {
				t.Fatalf("the ranks did not start:\n%s", stderr)
			}
			for _, s := range []syscall.Signal{syscall.SIGUSR1, syscall.SIGUSR2} {
				sigs <- s
				if !stderr.waitFor("] got "+s.String()+"\n", 3, 30*time.Second, done) {
					t.Fatalf("not every rank got %v:\n%s", s, stderr)
				}
			}
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Fatalf("the job did not end after the ranks got both signals:\n%s", stderr)
			}
			if err != nil {
				t.Errorf("Run = %v, want success: the job goes on after SIGUSR1 and SIGUSR2\n%s", err, stderr)
			}
		})
	}
}

// A remote rank whose process group gorun does not know yet (its pid
// marker has not arrived) gets SIGUSR1 and SIGUSR2 once it does: gorun
// holds them for it. The agent here is the fake ssh behind a wrapper that
// holds the remote side's stderr, where the pid marker comes, until the
// test releases it; the ranks say "ready" on stdout, which is not held.
// The signal channel is unbuffered, so once SIGUSR2 is taken gorun has
// handled SIGUSR1, before any rank's process group was known. (The
// wrapper's loop ends only at the release, or when the test is over and
// its directory gone: a kill command gorun sends late must not wait
// forever.)
func TestUserSignalBeforeRemotePID(t *testing.T) {
	dir := t.TempDir()
	release := filepath.Join(dir, "release")
	t.Cleanup(func() { os.WriteFile(release, nil, 0o644) })
	inner := fakeSSHAgent(t)[0]
	ssh := filepath.Join(t.TempDir(), "ssh")
	hold := "#!/bin/sh\n" +
		"{ " + shellQuote(inner) + ` "$@" 2>&1 >&3 3>&- | { while [ ! -e ` + shellQuote(release) + ` ]; do [ -d ` + shellQuote(dir) + ` ] || exit 1; sleep 0.05; done; exec cat; } >&2 3>&-; } 3>&1` + "\n"
	if err := os.WriteFile(ssh, []byte(hold), 0o755); err != nil {
		t.Fatal(err)
	}
	sigs := make(chan os.Signal)
	stdout, stderr := &waitWriter{}, &waitWriter{}
	cfg := Config{NP: 3, Hosts: []Host{{Name: "node1", Slots: 3}}, LaunchAgent: []string{ssh},
		Program: testBinary(t), Export: []string{"GORUN_TEST_ROLE=rank", "GORUN_TEST_MODE=usr"},
		KillGrace: time.Second, UseSrun: "no", Signals: sigs, Stdout: stdout, Stderr: stderr}
	done := make(chan struct{})
	var err error
	go func() {
		defer close(done)
		err = Run(t.Context(), cfg)
	}()
	fail := func(format string, args ...any) {
		t.Helper()
		os.WriteFile(release, nil, 0o644)
		<-done
		t.Fatalf(format+"\nstdout:\n%s\nstderr:\n%s", append(args, stdout, stderr)...)
	}
	if !stdout.waitFor("] ready\n", 3, time.Minute, done) {
		fail("the ranks did not start")
	}
	for _, s := range []os.Signal{syscall.SIGUSR1, syscall.SIGUSR2} {
		select {
		case sigs <- s:
		case <-done:
			fail("the job ended before it took %v", s)
		}
	}
	if strings.Contains(stderr.String(), "got") {
		fail("stderr was not held back")
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, s := range []syscall.Signal{syscall.SIGUSR1, syscall.SIGUSR2} {
		if !stderr.waitFor("] got "+s.String()+"\n", 3, time.Minute, done) {
			fail("not every rank got %v, sent before its process group was known", s)
		}
	}
	<-done
	if err != nil {
		t.Errorf("Run = %v, want success\n%s", err, stderr)
	}
}

// SIGHUP (gorun's terminal went away) stops the job as SIGTERM does, as
// mpirun's does: the ranks, local and remote, get SIGTERM, so that their
// handler for it runs, and gorun exits 129. gorun died of it at once: no
// rank's handler ran (the local ones got Pdeathsig's SIGKILL), and a
// program gorun had built was left in TMPDIR, or in the working directory
// for a remote job.
func TestHangupStopsJob(t *testing.T) {
	for _, tc := range []struct {
		name  string
		hosts []Host
	}{
		{"local", nil},
		{"remote", []Host{{Name: "node1", Slots: 2}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{NP: 2, Hosts: tc.hosts}
			if tc.hosts != nil {
				cfg.LaunchAgent = fakeSSHAgent(t)
			}
			sigs := make(chan os.Signal, 1)
			stderr := &waitWriter{}
			cfg.Signals, cfg.Stderr = sigs, stderr
			done := make(chan struct{})
			var err error
			go func() {
				defer close(done)
				_, _, err = runJob(t, "stop-signal", cfg)
			}()
			if !stderr.waitFor("] ready\n", 2, time.Minute, done) {
				t.Fatalf("the ranks did not start:\n%s", stderr)
			}
			sigs <- syscall.SIGHUP
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Fatalf("the job did not end after SIGHUP:\n%s", stderr)
			}
			if !errors.Is(err, ErrInterrupted) || ExitStatus(err) != 129 {
				t.Errorf("Run = %v (status %d), want interrupted, 129", err, ExitStatus(err))
			}
			if n := strings.Count(stderr.String(), "] got terminated\n"); n != 2 ||
				!strings.Contains(stderr.String(), "gorun: job interrupted by hangup; forwarding terminated to 2 ranks") {
				t.Errorf("%d ranks got SIGTERM, want 2, or gorun did not say so:\n%s", n, stderr)
			}
		})
	}
}
