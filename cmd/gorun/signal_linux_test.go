package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// gorun stopped by SIGINT, SIGTERM or SIGQUIT in the middle of a job leaves
// nothing behind: no process of any rank's process group (each rank has a
// helper that ignores both signals), nothing in its TMPDIR (where it
// builds the program, and where shm sockets once were), nothing new in
// /dev/shm. It exits with 128+signal and says why. The ranks loop over
// allreduce (shm) when the signal comes; in the ignore cases they ignore
// SIGINT and SIGTERM, so gorun's SIGKILL after --kill-grace, or after a
// second signal, ends them.
func TestSignalLeavesNothingBehind(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a comm program")
	}
	for _, tc := range []struct {
		name   string
		sigs   []syscall.Signal // sent to gorun, each after gorun reported the one before
		ignore bool             // the ranks ignore SIGINT and SIGTERM
		grace  time.Duration
		msgs   []string // on gorun's stderr
	}{
		{"SIGINT", []syscall.Signal{syscall.SIGINT}, false, time.Minute,
			[]string{"gorun: job interrupted by interrupt; forwarding interrupt to 3 ranks\n"}},
		{"SIGTERM", []syscall.Signal{syscall.SIGTERM}, false, time.Minute,
			[]string{"gorun: job interrupted by terminated; forwarding terminated to 3 ranks\n"}},
		// SIGQUIT is forwarded as itself (a Go rank prints its stacks and
		// exits 2); gorun died of it at once, leaving its build behind.
		{"SIGQUIT", []syscall.Signal{syscall.SIGQUIT}, false, time.Minute,
			[]string{"gorun: job interrupted by quit; forwarding quit to 3 ranks\n"}},
		{"SIGINT/ranks-ignore-it", []syscall.Signal{syscall.SIGINT}, true, time.Second,
			[]string{"gorun: 3 ranks still running 1s after SIGINT: killing them\n"}},
		{"SIGTERM/ranks-ignore-it", []syscall.Signal{syscall.SIGTERM}, true, time.Second,
			[]string{"gorun: 3 ranks still running 1s after SIGTERM: killing them\n"}},
		// A second signal within the (long) grace kills the ranks at once.
		{"SIGINT-twice", []syscall.Signal{syscall.SIGINT, syscall.SIGINT}, true, time.Minute,
			[]string{"gorun: job interrupted by interrupt; forwarding interrupt to 3 ranks\n",
				"gorun: interrupt again: killing 3 ranks\n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tmp := t.TempDir() // gorun's TMPDIR, and its ranks'
			shmBefore := devShm()
			args := []string{"-np", "3", "--transport", "shm", "--kill-grace", tc.grace.String()}
			if tc.ignore {
				args = append(args, "-x", "SIGLOOP_IGNORE=1")
			}
			cmd := gorunProgram(t, "./testdata/sigloop", args...)
			cmd.Env = append(cmd.Env, "TMPDIR="+tmp)
			stdout, stderr := &lineLog{}, &lineLog{}
			cmd.Stdout, cmd.Stderr = stdout, stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			var groups []int // the ranks' process groups (each rank leads its own)
			t.Cleanup(func() {
				cmd.Process.Kill()
				for _, g := range groups {
					syscall.Kill(-g, syscall.SIGKILL)
				}
			})
			// The first build of the program can take minutes on a loaded machine.
			ready := regexp.MustCompile(`(?m)^\[\d\] sigloop: pid (\d+) helper (\d+)$`)
			if !stdout.waitFor(func(s string) bool { return len(ready.FindAllString(s, -1)) == 3 }, 5*time.Minute, exited) {
				t.Fatalf("the ranks did not start\nstdout:\n%s\nstderr:\n%s", stdout, stderr)
			}
			for _, m := range ready.FindAllStringSubmatch(stdout.String(), -1) {
				pid, _ := strconv.Atoi(m[1])
				helper, _ := strconv.Atoi(m[2])
				if g := pgrp(helper); g != pid {
					t.Fatalf("helper %d is in process group %d, not its rank's %d", helper, g, pid)
				}
				groups = append(groups, pid)
			}
			var sent time.Time
			for i, sig := range tc.sigs {
				if i > 0 && !stderr.waitFor(func(s string) bool { return strings.Contains(s, tc.msgs[i-1]) }, 30*time.Second, exited) {
					t.Fatalf("gorun did not report signal %d (%v)\nstderr:\n%s", i, tc.sigs[i-1], stderr)
				}
				sent = time.Now()
				if err := cmd.Process.Signal(sig); err != nil {
					t.Fatal(err)
				}
			}
			var err error
			select {
			case err = <-exited:
			case <-time.After(30 * time.Second):
				t.Fatalf("gorun did not exit 30s after %v (kill grace %v)\nstderr:\n%s", tc.sigs[len(tc.sigs)-1], tc.grace, stderr)
			}
			took := time.Since(sent)
			var ee *exec.ExitError
			last := tc.sigs[len(tc.sigs)-1]
			if !errors.As(err, &ee) || ee.ExitCode() != 128+int(last) {
				t.Errorf("gorun exited with %v, want status %d", err, 128+int(last))
			}
			for _, m := range tc.msgs {
				if !strings.Contains(stderr.String(), m) {
					t.Errorf("stderr does not say %q:\n%s", m, stderr)
				}
			}
			if tc.grace == time.Minute && took > 20*time.Second {
				t.Errorf("gorun took %v to exit after the last signal: it waited for the kill grace", took)
			}
			// gorun reaped the ranks; a member of a rank's group that is
			// still there outlives the job. Killing takes a moment to land.
			for _, g := range groups {
				var left []int
				for end := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
					if left = groupMembers(g); len(left) == 0 || time.Now().After(end) {
						break
					}
				}
				if len(left) > 0 {
					t.Errorf("rank %d's process group still has %v after gorun exited", g, left)
				}
			}
			if left := walk(tmp); len(left) > 0 {
				t.Errorf("left in gorun's TMPDIR: %v", left)
			}
			for name := range devShm() {
				if !shmBefore[name] {
					if strings.Contains(strings.ToLower(name), "gorun") {
						t.Errorf("left in /dev/shm: %s", name)
					} else {
						t.Logf("new in /dev/shm (another test's?): %s", name)
					}
				}
			}
		})
	}
}

// lineLog collects a process's output for waitFor.
type lineLog struct {
	mu      sync.Mutex
	b       strings.Builder
	changed chan struct{} // closed and replaced on every Write
}

func (l *lineLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.Write(p)
	if l.changed != nil {
		close(l.changed)
		l.changed = nil
	}
	return len(p), nil
}

func (l *lineLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// waitFor waits until ok holds for the output, for at most d, and not
// after the process exited (exited is left for the caller).
func (l *lineLog) waitFor(ok func(string) bool, d time.Duration, exited chan error) bool {
	timeout := time.After(d)
	for {
		l.mu.Lock()
		s := l.b.String()
		if l.changed == nil {
			l.changed = make(chan struct{})
		}
		changed := l.changed
		l.mu.Unlock()
		if ok(s) {
			return true
		}
		select {
		case <-changed:
		case err := <-exited:
			exited <- err
			return ok(l.String())
		case <-timeout:
			return false
		}
	}
}

// pgrp is pid's process group, or 0 when pid is gone or a zombie.
func pgrp(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// pid (comm) state ppid pgrp ...; comm may hold spaces and parentheses.
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 3 || f[0] == "Z" {
		return 0
	}
	g, _ := strconv.Atoi(f[2])
	return g
}

// groupMembers lists the live processes of process group g (zombies are
// dead: their parent, init here, has yet to reap them).
func groupMembers(g int) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err == nil && pgrp(pid) == g {
			pids = append(pids, pid)
		}
	}
	return pids
}

// walk lists what is under dir.
func walk(dir string) []string {
	var names []string
	filepath.WalkDir(dir, func(p string, _ fs.DirEntry, _ error) error {
		if p != dir {
			names = append(names, strings.TrimPrefix(p, dir+"/"))
		}
		return nil
	})
	return names
}

// devShm lists /dev/shm.
func devShm() map[string]bool {
	m := map[string]bool{}
	ents, _ := os.ReadDir("/dev/shm")
	for _, e := range ents {
		m[e.Name()] = true
	}
	return m
}

// SIGUSR1 and SIGUSR2 sent to gorun reach every rank, as mpirun forwards
// them, and do not stop the job: the ranks handle them and exit 0, and so
// does gorun.
func TestUserSignalsForwarded(t *testing.T) {
	cmd := gorun(t, "-np", "3", "-x", "GORUN_TEST_USR=1")
	stdout, stderr := &lineLog{}, &lineLog{}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	count := func(s string) func(string) bool {
		return func(out string) bool { return strings.Count(out, s) == 3 }
	}
	if !stdout.waitFor(count("] ready\n"), time.Minute, exited) {
		t.Fatalf("the ranks did not start\nstdout:\n%s\nstderr:\n%s", stdout, stderr)
	}
	for _, s := range []syscall.Signal{syscall.SIGUSR1, syscall.SIGUSR2} {
		if err := cmd.Process.Signal(s); err != nil {
			t.Fatal(err)
		}
		if !stdout.waitFor(count("] got "+s.String()+"\n"), 30*time.Second, exited) {
			t.Fatalf("not every rank got %v\nstdout:\n%s\nstderr:\n%s", s, stdout, stderr)
		}
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("gorun: %v, want status 0\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("gorun did not exit after its ranks did\nstderr:\n%s", stderr)
	}
}

// SIGHUP stops gorun as SIGTERM does (the ranks get SIGTERM; status 129),
// and cleans up: the program it built is gone. Under nohup gorun leaves
// it ignored, and the job goes on until the SIGINT that follows. A test
// run that itself ignores SIGHUP (started under nohup, as a CI job may
// be) passes that on to gorun, so there gorun is started through
// `env --default-signal=HUP`.
func TestHangup(t *testing.T) {
	nohup, err := exec.LookPath("nohup")
	env, envErr := exec.LookPath("env")
	if envErr == nil && exec.Command(env, "--default-signal=HUP", "true").Run() != nil {
		envErr = errors.New("env has no --default-signal")
	}
	for _, underNohup := range []bool{false, true} {
		t.Run(fmt.Sprintf("nohup=%v", underNohup), func(t *testing.T) {
			if underNohup && err != nil {
				t.Skip("no nohup")
			}
			tmp := t.TempDir() // gorun's TMPDIR, where it builds the program
			cmd := gorunProgram(t, "./testdata/sigloop", "-np", "2", "--transport", "shm", "--kill-grace", "5s")
			switch {
			case underNohup:
				cmd.Path, cmd.Args = nohup, append([]string{"nohup"}, cmd.Args...)
			case signal.Ignored(syscall.SIGHUP) && envErr != nil:
				t.Skipf("this test runs with SIGHUP ignored, which gorun would inherit, and env cannot reset it: %v", envErr)
			case signal.Ignored(syscall.SIGHUP):
				cmd.Path, cmd.Args = env, append([]string{"env", "--default-signal=HUP"}, cmd.Args...)
			}
			cmd.Env = append(cmd.Env, "TMPDIR="+tmp)
			stdout, stderr := &lineLog{}, &lineLog{}
			cmd.Stdout, cmd.Stderr = stdout, stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill()
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			ready := regexp.MustCompile(`(?m)^\[\d\] sigloop: pid (\d+) helper (\d+)$`)
			if !stdout.waitFor(func(s string) bool { return len(ready.FindAllString(s, -1)) == 2 }, 5*time.Minute, exited) {
				t.Fatalf("the ranks did not start\nstdout:\n%s\nstderr:\n%s", stdout, stderr)
			}
			cmd.Process.Signal(syscall.SIGHUP)
			want := 129
			if underNohup {
				cmd.Process.Signal(syscall.SIGINT) // after SIGHUP: the first that gorun acts on names the status
				want = 130
			}
			select {
			case err := <-exited:
				var ee *exec.ExitError
				if !errors.As(err, &ee) || ee.ExitCode() != want {
					t.Errorf("gorun: %v, want exit status %d\nstderr:\n%s", err, want, stderr)
				}
			case <-time.After(time.Minute):
				t.Fatalf("gorun did not exit\nstderr:\n%s", stderr)
			}
			if left, _ := os.ReadDir(tmp); len(left) > 0 {
				t.Errorf("gorun left %v in its TMPDIR", left)
			}
		})
	}
}

// When what reads gorun's output goes away (gorun ... | head), gorun
// stops the job (SIGTERM to the ranks), removes the program it built and
// exits 141, as a pipeline's writer killed by SIGPIPE would. It died of
// SIGPIPE at its next write: the ranks got Pdeathsig's SIGKILL and the
// build stayed in TMPDIR (in the working directory for remote jobs).
func TestStdoutReaderGone(t *testing.T) {
	tmp := t.TempDir()
	cmd := gorunProgram(t, "./testdata/sigloop", "-np", "2", "--transport", "shm", "-x", "SIGLOOP_CHATTY=1")
	cmd.Env = append(cmd.Env, "TMPDIR="+tmp)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &lineLog{}
	cmd.Stdout, cmd.Stderr = w, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	defer cmd.Process.Kill()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	ready := regexp.MustCompile(`^\[\d\] sigloop: pid (\d+) helper \d+$`)
	var groups []int
	sc := bufio.NewScanner(r)
	for len(groups) < 2 && sc.Scan() {
		if m := ready.FindStringSubmatch(sc.Text()); m != nil {
			pid, _ := strconv.Atoi(m[1])
			groups = append(groups, pid)
		}
	}
	if len(groups) < 2 {
		r.Close()
		t.Fatalf("the ranks did not start\nstderr:\n%s", stderr)
	}
	t.Cleanup(func() {
		for _, g := range groups {
			syscall.Kill(-g, syscall.SIGKILL)
		}
	})
	r.Close() // as head does once it has its lines
	select {
	case err = <-exited:
	case <-time.After(time.Minute):
		t.Fatalf("gorun did not exit after its stdout's reader went away\nstderr:\n%s", stderr)
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 128+int(syscall.SIGPIPE) {
		t.Errorf("gorun: %v, want exit status 141 (not death by SIGPIPE)\nstderr:\n%s", err, stderr)
	}
	if !strings.Contains(stderr.String(), "gorun: job interrupted by broken pipe; forwarding terminated to 2 ranks") {
		t.Errorf("stderr does not say why gorun stopped:\n%s", stderr)
	}
	if left := walk(tmp); len(left) > 0 {
		t.Errorf("left in gorun's TMPDIR: %v", left)
	}
}

// A rank 0 that closes its stdin while gorun still has input for it
// breaks that pipe, not gorun's output: the job goes on.
func TestStdinReaderGoneGoesOn(t *testing.T) {
	cmd := gorunProgram(t, "/bin/sh", "-np", "2")
	cmd.Args = append(cmd.Args, "-c", "exec 0<&-; sleep 1; echo done")
	cmd.Stdin = endless{}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil || strings.Count(string(out), "] done\n") != 2 {
		t.Errorf("gorun: %v, output %q, want both ranks done and status 0\nstderr:\n%s", err, out, stderr.String())
	}
}

// endless is an input that never ends.
type endless struct{}

func (endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'y'
	}
	return len(p), nil
}
