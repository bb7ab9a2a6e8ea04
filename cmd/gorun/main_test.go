package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/launcher"
)

// The test binary is also gorun (GORUN_TEST_ROLE=gorun) and the ranks
// (GORUN_TEST_ROLE=rank), as os/exec's tests re-run themselves.
func TestMain(m *testing.M) {
	switch os.Getenv("GORUN_TEST_ROLE") {
	case "gorun":
		os.Exit(run(os.Args[1:]))
	case "rank":
		os.Exit(rank())
	}
	os.Exit(m.Run())
}

// rank waits for SIGINT, says so and exits 0; GORUN_TEST_EXIT makes rank 1
// exit with that status at once instead.
func rank() int {
	r := os.Getenv("GORUN_RANK")
	if os.Getenv("GORUN_TEST_STDIN") != "" {
		b, _ := io.ReadAll(os.Stdin)
		fmt.Printf("stdin %q\n", b)
		return 0
	}
	if dir := os.Getenv("GORUN_TEST_PIDDIR"); dir != "" {
		os.WriteFile(filepath.Join(dir, r), []byte(fmt.Sprint(os.Getpid())), 0o644)
		time.Sleep(20 * time.Second)
		return 0
	}
	if code := os.Getenv("GORUN_TEST_EXIT"); code != "" {
		if r == "1" {
			var n int
			fmt.Sscan(code, &n)
			return n
		}
		time.Sleep(20 * time.Second)
		return 0
	}
	if os.Getenv("GORUN_TEST_USR") != "" {
		// Handles SIGUSR1 then SIGUSR2, says so, and exits 0.
		sigs := make(chan os.Signal, 2)
		signal.Notify(sigs, syscall.SIGUSR1, syscall.SIGUSR2)
		fmt.Println("ready")
		for range 2 {
			select {
			case s := <-sigs:
				fmt.Println("got", s)
			case <-time.After(20 * time.Second):
				fmt.Println("no signal")
				return 3
			}
		}
		return 0
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT)
	fmt.Println("ready")
	select {
	case s := <-sigs:
		fmt.Println("got", s)
		return 0
	case <-time.After(20 * time.Second):
		fmt.Println("no signal")
		return 3
	}
}

func TestParseArgs(t *testing.T) {
	dir := t.TempDir()
	hostfile := filepath.Join(dir, "hosts")
	os.WriteFile(hostfile, []byte("n1 slots=2\nn2 slots=2 # second\n"), 0o644)
	mpich := filepath.Join(dir, "mpich-hosts")
	os.WriteFile(mpich, []byte("n1:2\nn2:1 max_slots=4\n"), 0o644)
	for _, tc := range []struct {
		args []string
		want func(*launcher.Config)
		bad  bool
	}{
		{args: []string{"-np", "4", "./prog", "-np", "8", "--x"}, want: func(c *launcher.Config) {
			c.NP, c.Program, c.Args = 4, "./prog", []string{"-np", "8", "--x"}
		}},
		{args: []string{"-n", "2", "--", "prog"}, want: func(c *launcher.Config) { c.NP, c.Program, c.Args = 2, "prog", []string{} }},
		{args: []string{"-H", "a:2,b:2", "prog"}, want: func(c *launcher.Config) {
			c.NP, c.Program, c.Args = 4, "prog", []string{}
			c.Hosts = []launcher.Host{{Name: "a", Slots: 2}, {Name: "b", Slots: 2}}
		}},
		{args: []string{"--hostfile", hostfile, "-np", "3", "--tag-output=false", "-x", "A=1", "-x", "B",
			"--timeout", "90", "--bind-to", "numa", "--gossip-port", "7946", "--launch-agent", "ip netns exec",
			"--elastic", "--stall-timeout", "1m", "--kill-grace", "2s", "--transport", "tcp", "--algo", "allreduce:ring",
			"--debug", "info", "--srun", "no", "--fault", "rank=2:kill:write:40", "prog", "arg"},
			want: func(c *launcher.Config) {
				c.NP, c.Program, c.Args = 3, "prog", []string{"arg"}
				c.Hosts = []launcher.Host{{Name: "n1", Slots: 2}, {Name: "n2", Slots: 2}}
				c.NoTag, c.Export, c.Timeout = true, []string{"A=1", "B"}, 90*time.Second
				c.Bind, c.GossipPort, c.LaunchAgent = "numa", 7946, []string{"ip", "netns", "exec"}
				c.Elastic, c.StallTimeout, c.KillGrace = true, time.Minute, 2*time.Second
				c.Transport, c.Algo, c.Debug, c.UseSrun = "tcp", "allreduce:ring", "info", "no"
				c.Fault = "rank=2:kill:write:40"
			}},
		// MPICH's hostfile lines, host:N; Open MPI's max_slots.
		{args: []string{"--hostfile", mpich, "prog"}, want: func(c *launcher.Config) {
			c.NP, c.Program, c.Args = 3, "prog", []string{}
			c.Hosts = []launcher.Host{{Name: "n1", Slots: 2}, {Name: "n2", Slots: 1, MaxSlots: 4}}
		}},
		{args: []string{"--timeout", "1.5", "-np", "1", "p"}, want: func(c *launcher.Config) {
			c.NP, c.Program, c.Args, c.Timeout = 1, "p", []string{}, 1500*time.Millisecond
		}},
		// A boolean flag takes a following true/false as its value, never
		// as the program (gorun --tag-output false must not run /bin/false).
		{args: []string{"-np", "2", "--tag-output", "false", "--elastic", "true", "prog", "false"}, want: func(c *launcher.Config) {
			c.NP, c.Program, c.Args, c.NoTag, c.Elastic = 2, "prog", []string{"false"}, true, true
		}},
		{args: []string{"-np", "2", "-wdir", "/tmp", "--output-filename", "/tmp/logs", "prog"}, want: func(c *launcher.Config) {
			c.NP, c.Program, c.Args, c.WorkDir, c.OutputDir = 2, "prog", []string{}, "/tmp", "/tmp/logs"
		}},
		{args: []string{"-H", "a:4,b:4", "--npernode", "1", "--map-by", "node", "--report-bindings", "prog"}, want: func(c *launcher.Config) {
			c.NP, c.Program, c.Args, c.MapBy, c.ReportBindings = 2, "prog", []string{}, "node", true
			c.Hosts = []launcher.Host{{Name: "a", Slots: 1}, {Name: "b", Slots: 1}}
			c.NPerNode = 1
		}},
		// mpirun's --oversubscribe: more ranks than slots.
		{args: []string{"-H", "a:1", "-np", "3", "--oversubscribe", "prog"}, want: func(c *launcher.Config) {
			c.NP, c.Program, c.Args, c.Oversubscribe = 3, "prog", []string{}, true
			c.Hosts = []launcher.Host{{Name: "a", Slots: 1}}
		}},
		// Without hosts, -N is the launcher's (srun's --ntasks-per-node
		// inside an allocation): no host list that would turn srun off.
		{args: []string{"-N", "2", "prog"}, want: func(c *launcher.Config) {
			c.Program, c.Args, c.NPerNode = "prog", []string{}, 2
		}},
		{args: []string{"-np", "1", "--tag-output=false", "./a", "x", ":", "-np", "3", "./b", "-y"}, want: func(c *launcher.Config) {
			c.NP, c.Program, c.Args, c.NoTag = 4, "./a", []string{"x"}, true
			c.Apps = []launcher.App{{NP: 1, Program: "./a", Args: []string{"x"}}, {NP: 3, Program: "./b", Args: []string{"-y"}}}
		}},
		{args: []string{"-np", "1", "./a", ":", "./b"}, bad: true},
		{args: []string{"-np", "1", "./a", ":", "-np", "2"}, bad: true},
		{args: []string{"-np", "2", "--elastic", "./false"}, want: func(c *launcher.Config) {
			c.NP, c.Program, c.Args, c.Elastic = 2, "./false", []string{}, true
		}},
		// Tunables are checked once, here, before any rank starts.
		{args: []string{"-np", "2", "--transport", "infiniband", "prog"}, bad: true},
		{args: []string{"-np", "2", "--transport", "mem", "prog"}, bad: true},
		// verbs may be in the ranks' build even when not in gorun's.
		{args: []string{"-np", "2", "--transport", "verbs", "prog"}, want: func(c *launcher.Config) {
			c.NP, c.Program, c.Args, c.Transport = 2, "prog", []string{}, "verbs"
		}},
		{args: []string{"-np", "2", "--algo", "allreduce:nosuch", "prog"}, bad: true},
		{args: []string{"-np", "2", "--debug", "loud", "prog"}, bad: true},
		// And tunables passed with -x.
		{args: []string{"-np", "2", "-x", "GORUN_QUORUM=1", "prog"}, bad: true},
		{args: []string{"-np", "2", "-x", "GORUN_TIMEOUT=soon", "prog"}, bad: true},
		{args: []string{"-np", "2", "-x", "GORUN_QUORUM=majority", "prog"}, want: func(c *launcher.Config) {
			c.NP, c.Program, c.Args, c.Export = 2, "prog", []string{}, []string{"GORUN_QUORUM=majority"}
		}},
		// So is --fault: its syntax, and the ranks its rules name.
		{args: []string{"-np", "2", "--fault", "rank=1,kill", "prog"}, bad: true},
		{args: []string{"-np", "2", "--fault", "rank=1:kill:write:x", "prog"}, bad: true},
		{args: []string{"-np", "2", "--fault", "rank=1:kill;rank=2:freeze", "prog"}, bad: true},
		{args: []string{"-np", "2", "-x", "GORUN_FAULT=rank=1,kill", "prog"}, bad: true},
		{args: []string{"-np", "2", "--fault", "rank=1:kill;freeze:send", "prog"}, want: func(c *launcher.Config) {
			c.NP, c.Program, c.Args, c.Fault = 2, "prog", []string{}, "rank=1:kill;freeze:send"
		}},
		// A rank of the second program of an MPMD job.
		{args: []string{"-np", "1", "--fault", "rank=3:kill", "./a", ":", "-np", "3", "./b"}, want: func(c *launcher.Config) {
			c.NP, c.Program, c.Args, c.Fault = 4, "./a", []string{}, "rank=3:kill"
			c.Apps = []launcher.App{{NP: 1, Program: "./a", Args: []string{}}, {NP: 3, Program: "./b", Args: []string{}}}
		}},
		{args: []string{"-np", "1", "--fault", "rank=4:kill", "./a", ":", "-np", "3", "./b"}, bad: true},
		// A rank that only a grown job has.
		{args: []string{"-np", "2", "--elastic", "--max-np", "4", "--fault", "rank=3:kill", "prog"}, want: func(c *launcher.Config) {
			c.NP, c.Program, c.Args, c.Elastic, c.MaxNP, c.Fault = 2, "prog", []string{}, true, 4, "rank=3:kill"
		}},
		{args: []string{"-np", "2"}, bad: true},
		// Without -np or hosts the launcher decides: a Slurm allocation's
		// tasks, as srun and mpirun do there.
		{args: []string{"prog"}, want: func(c *launcher.Config) { c.Program, c.Args = "prog", []string{} }},
		{args: []string{"-np", "0", "prog"}, bad: true},
		{args: []string{"-n", "0", "-H", "a:2", "prog"}, bad: true},
		{args: []string{"./a", ":", "-np", "2", "./b"}, bad: true},
		{args: []string{"-np", "x", "prog"}, bad: true},
		{args: []string{"--timeout", "soon", "-np", "1", "prog"}, bad: true},
		{args: []string{"-H", "a", "--hostfile", hostfile, "prog"}, bad: true},
		{args: []string{"-H", "a;b", "prog"}, bad: true},
		{args: []string{"--hostfile", filepath.Join(dir, "missing"), "prog"}, bad: true},
		{args: []string{"--nosuchflag", "prog"}, bad: true},
	} {
		got, err := parseArgs(tc.args, io.Discard, io.Discard)
		if tc.bad {
			if err == nil {
				t.Errorf("parseArgs(%q) accepted: %+v", tc.args, got)
			}
			continue
		}
		want := launcher.Config{Bind: "none", UseSrun: "auto"}
		tc.want(&want)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("parseArgs(%q) =\n %+v, %v\nwant\n %+v", tc.args, got, err, want)
		}
	}
}

// gorun starts the test binary as gorun, with the test binary as the ranks.
func gorun(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	return gorunProgram(t, testBinary(t), append(args, "-x", "GORUN_TEST_ROLE=rank")...)
}

// gorunProgram starts the test binary as gorun with args and program.
func gorunProgram(t *testing.T, program string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(testBinary(t), append(append([]string{"--srun=no"}, args...), program)...)
	cmd.Env = append(os.Environ(), "GORUN_TEST_ROLE=gorun")
	return cmd
}

func testBinary(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return self
}

func TestSignalIsForwarded(t *testing.T) {
	cmd := gorun(t, "-np", "3", "--kill-grace", "5s")
	cmd.Args = append(cmd.Args[:len(cmd.Args)-1], "-x", "GORUN_TEST_X=1", cmd.Args[len(cmd.Args)-1])
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	sc := bufio.NewScanner(stdout)
	var lines []string
	for ready := 0; ready < 3 && sc.Scan(); {
		lines = append(lines, sc.Text())
		if strings.HasSuffix(sc.Text(), "] ready") {
			ready++
		}
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("gorun did not exit after SIGINT; output %q\n%s", lines, stderr.String())
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 128+int(syscall.SIGINT) {
		t.Errorf("gorun exited with %v, want status 130", err)
	}
	for r := 0; r < 3; r++ {
		want := fmt.Sprintf("[%d] got interrupt", r)
		found := false
		for _, l := range lines {
			found = found || l == want
		}
		if !found {
			t.Errorf("no %q in output %q", want, lines)
		}
	}
	if !strings.Contains(stderr.String(), "job interrupted by interrupt") {
		t.Errorf("stderr: %q", stderr.String())
	}
}

func TestExitStatusOfFailedRank(t *testing.T) {
	cmd := gorun(t, "-np", "3", "-x", "GORUN_TEST_EXIT=42", "--kill-grace", "1s")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 42 {
		t.Fatalf("gorun exited with %v, want status 42\n%s", err, stderr.String())
	}
	if time.Since(start) > 15*time.Second {
		t.Errorf("gorun took %v: other ranks were not stopped", time.Since(start))
	}
	if got := stderr.String(); got != "gorun: rank 1 exited with status 42; stopping the other 2\n" {
		t.Errorf("stderr = %q", got)
	}
}

// Ranks die with gorun even when gorun gets SIGKILL and cannot stop them.
func TestRanksDieWithGorun(t *testing.T) {
	dir := t.TempDir()
	cmd := gorun(t, "-np", "2", "-x", "GORUN_TEST_PIDDIR="+dir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var pids []int
	for end := time.Now().Add(20 * time.Second); len(pids) < 2; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			cmd.Process.Kill()
			t.Fatal("ranks did not start")
		}
		pids = pids[:0]
		for _, r := range []string{"0", "1"} {
			var pid int
			if b, err := os.ReadFile(filepath.Join(dir, r)); err == nil && len(b) > 0 {
				fmt.Sscan(string(b), &pid)
				pids = append(pids, pid)
			}
		}
	}
	cmd.Process.Kill()
	cmd.Wait()
	for _, pid := range pids {
		gone := false
		for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
				gone = true
				break
			}
		}
		if !gone {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Errorf("rank pid %d outlived gorun", pid)
		}
	}
}

// gorun's stdin goes to rank 0 only.
func TestStdinGoesToRankZero(t *testing.T) {
	cmd := gorun(t, "-np", "2", "-x", "GORUN_TEST_STDIN=1")
	cmd.Stdin = strings.NewReader("line 1\nline 2\n")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("gorun: %v", err)
	}
	got := strings.Split(strings.TrimSpace(string(out)), "\n")
	slices.Sort(got)
	want := []string{`[0] stdin "line 1\nline 2\n"`, `[1] stdin ""`}
	if !slices.Equal(got, want) {
		t.Fatalf("output %q, want %q", got, want)
	}
}

func TestVersion(t *testing.T) {
	var out strings.Builder
	_, err := parseArgs([]string{"--version"}, &out, io.Discard)
	if !isHelp(err) || !strings.HasPrefix(out.String(), "gorun ") || !strings.Contains(out.String(), "go1.") {
		t.Fatalf("--version: %q, %v", out.String(), err)
	}
}

// --transport mem is refused with a message that says why.
func TestTransportMemRefusedAtOnce(t *testing.T) {
	_, err := parseArgs([]string{"-np", "3", "--transport", "mem", "prog"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "one process") {
		t.Fatalf("--transport mem: %v", err)
	}
}

// gorun checks the tunables every rank will get, gorun's own environment's
// included (launcher.RankTunables): GORUN_FAULT there too, and -x VAR
// taking gorun's value.
func TestParseArgsChecksEnvironment(t *testing.T) {
	for _, tc := range []struct {
		env  string
		args []string
		bad  bool
	}{
		{"rank=1,kill", []string{"-np", "2", "prog"}, true},
		{"rank=1:kill", []string{"-np", "2", "prog"}, false},
		{"rank=1:kill", []string{"-np", "1", "prog"}, true},
		{"rank=1:kill", []string{"-np", "2", "--fault", "rank=3:kill", "prog"}, true}, // the flag wins
		{"rank=9:kill", []string{"-np", "2", "--fault", "rank=1:kill", "prog"}, false},
		{"rank=1,kill", []string{"-np", "2", "-x", "GORUN_FAULT", "prog"}, true},
		{"rank=1,kill", []string{"-np", "2", "-x", "GORUN_FAULT=kill:send:3", "prog"}, false}, // -x wins
	} {
		t.Setenv("GORUN_FAULT", tc.env)
		_, err := parseArgs(tc.args, io.Discard, io.Discard)
		if (err != nil) != tc.bad {
			t.Errorf("GORUN_FAULT=%q gorun %q: %v, want an error: %v", tc.env, tc.args, err, tc.bad)
		}
	}
	t.Setenv("GORUN_FAULT", "")
	t.Setenv("GORUN_QUORUM", "yes")
	if _, err := parseArgs([]string{"-np", "2", "prog"}, io.Discard, io.Discard); err == nil {
		t.Error("GORUN_QUORUM=yes in gorun's environment accepted")
	}
}

// Every usage error exits 2 before any rank starts: a flag that does not
// parse, and a bad value that gorun or the launcher finds (-np -1, --map-by,
// --bind-to, an unset -x VAR, more ranks than slots, a bad hostfile line,
// an unwritable --timeline, --srun yes outside a Slurm allocation).
func TestUsageErrorExitsTwo(t *testing.T) {
	t.Setenv("SLURM_JOB_ID", "")
	dir := t.TempDir()
	hostfile := filepath.Join(dir, "hosts")
	os.WriteFile(hostfile, []byte("n1 slots=two\n"), 0o644)
	for _, args := range [][]string{
		{"--nosuchflag", "-np", "1"},
		{"-np", "x"},
		{"-np", "0"},
		{"-np", "-1"},
		{"-np", "1", "--map-by", "socket"},
		{"-np", "1", "--bind-to", "socket"},
		{"-np", "1", "-x", "GORUN_TEST_SURELY_UNSET_VAR"},
		{"-np", "3", "-H", "localhost:2"},
		{"-np", "1", "--hostfile", hostfile},
		{"-np", "1", "--timeline", filepath.Join(dir, "missing", "tl.json")},
		{"-np", "1", "--srun", "yes"},
		{},                                  // no -np, hosts or Slurm allocation
		{"-np", "2", "--max-restarts", "1"}, // without --elastic
		{"-np", "1", "--timeout", "-5"},     // not "no timeout"
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			cmd := gorunProgram(t, "/bin/sh", args...)
			cmd.Args = append(cmd.Args, "-c", "echo started")
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 2 {
				t.Errorf("gorun %q: %v, want exit status 2\n%s", args, err, stderr.String())
			}
			if stdout.Len() > 0 {
				t.Errorf("gorun %q started a rank: %q", args, stdout.String())
			}
		})
	}
}
