package launcher

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/internal/jobctl"
)

// The test binary doubles as the programs a job runs, as os/exec's tests
// do: GORUN_TEST_ROLE=rank makes it a fake rank (GORUN_TEST_MODE says which
// behaviour), and run under the name "ssh" it is a fake ssh that hands its
// command string to sh like ssh's remote side does.
func TestMain(m *testing.M) {
	switch {
	case filepath.Base(os.Args[0]) == "ssh":
		os.Exit(fakeSSH(os.Args[1:]))
	case filepath.Base(os.Args[0]) == "srun":
		os.Exit(fakeSrun(os.Args[1:]))
	case os.Getenv("GORUN_TEST_ROLE") == "rank":
		os.Exit(fakeRank(os.Getenv("GORUN_TEST_MODE"), os.Args[1:]))
	case os.Getenv("GORUN_TEST_ROLE") == "netns-agent":
		os.Exit(netnsAgent(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// fakeSSH runs "ssh HOST COMMAND" as ssh's remote side would: COMMAND is
// one string for the remote shell, in a fresh environment.
func fakeSSH(args []string) int {
	if len(args) != 2 {
		fmt.Fprintf(os.Stderr, "fake ssh: want HOST COMMAND, got %q\n", args)
		return 255
	}
	if dir := os.Getenv("GORUN_TEST_SSH_LOG"); dir != "" {
		os.WriteFile(filepath.Join(dir, "host-"+args[0]+"-"+fmt.Sprint(os.Getpid())), []byte(args[1]), 0o644)
	}
	cmd := exec.Command("/bin/sh", "-c", args[1])
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	cmd.Dir = os.Getenv("HOME") // where sshd starts the command
	// "Remote" processes are out of reach of signals to ssh's group, as
	// they are on a real remote host.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		return 255
	}
	return 0
}

func fakeRank(mode string, args []string) int {
	rank := os.Getenv(EnvRank)
	dir := os.Getenv("GORUN_TEST_DIR")
	switch mode {
	case "env":
		for _, kv := range os.Environ() {
			if strings.HasPrefix(kv, "GORUN_") || strings.HasPrefix(kv, "TESTVAR_") || strings.HasPrefix(kv, "SLURM_PROCID=") {
				fmt.Println(kv)
			}
		}
		return 0
	case "args":
		in, _ := io.ReadAll(os.Stdin)
		b, _ := json.Marshal(struct {
			Args    []string
			Hostile string
			Cwd     string
			Token   string
			Stdin   string
		}{args, os.Getenv("TESTVAR_HOSTILE"), mustGetwd(), os.Getenv(EnvJobToken), string(in)})
		fmt.Printf("%s\n", b)
		return 0
	case "lines":
		// Four goroutines write lines in pieces, racing each other; gorun
		// must still print whole lines.
		var mu sync.Mutex
		var wg sync.WaitGroup
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 200; i++ {
					line := fmt.Sprintf("rank=%s g=%d i=%d %s", rank, g, i, strings.Repeat("x", i*7%300))
					mu.Lock()
					// Byte-sized pieces through an unbuffered stdout
					// produce many small writes.
					for j := 0; j < len(line); j += 13 {
						os.Stdout.WriteString(line[j:min(j+13, len(line))])
					}
					os.Stdout.WriteString("\n")
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		os.Stdout.WriteString("no newline at end rank=" + rank)
		return 0
	case "restart":
		// Rank 1 fails on its first start; restarted (--max-restarts), it
		// prints what a restarted rank gets and writes a file the others
		// wait for, so that none ends first.
		if rank == "1" && os.Getenv(EnvRestart) == "" {
			return 7
		}
		if rank == "1" {
			fmt.Printf("restart=%s fault=%q token=%s\n", os.Getenv(EnvRestart), os.Getenv(EnvFault), os.Getenv(EnvJobToken))
			os.WriteFile(filepath.Join(dir, "restarted"), nil, 0o644)
			return 0
		}
		waitForFiles(dir, "restarted", 1)
		fmt.Printf("token=%s\n", os.Getenv(EnvJobToken))
		return 0
	case "fail":
		// The rank named by GORUN_TEST_FAIL exits with status 7 (or kills
		// itself with SIGSEGV for "segv"); the others wait to be stopped
		// and record the SIGTERM they get.
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGTERM)
		os.WriteFile(filepath.Join(dir, "pid-"+rank), []byte(fmt.Sprint(os.Getpid())), 0o644)
		if rank == os.Getenv("GORUN_TEST_FAIL") {
			// Fail once every other rank is ready for its SIGTERM.
			waitForFiles(dir, "pid-", mustAtoi(os.Getenv(EnvSize)))
			if os.Getenv("GORUN_TEST_HOW") == "kill" {
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
				time.Sleep(time.Second)
			}
			return 7
		}
		select {
		case <-sigs:
			os.WriteFile(filepath.Join(dir, "term-"+rank), nil, 0o644)
			fmt.Println("stopping on SIGTERM") // must reach gorun's output
			return 143
		case <-time.After(20 * time.Second):
			return 0
		}
	case "ignore-term":
		// Ignores SIGTERM: gorun must SIGKILL it after the grace period.
		signal.Ignore(syscall.SIGTERM)
		os.WriteFile(filepath.Join(dir, "ignoring-"+rank), []byte(fmt.Sprint(os.Getpid())), 0o644)
		if rank == "0" {
			waitForFiles(dir, "ignoring-", mustAtoi(os.Getenv(EnvSize)))
			return 5
		}
		time.Sleep(20 * time.Second)
		return 0
	case "stall":
		c := jobctl.FromEnv()
		defer c.Close()
		r := mustAtoi(rank)
		c.Phase(r, "bootstrap")
		c.Joined(r)
		c.Phase(r, "ready")
		if r == 2 {
			c.Enter("broadcast", 811)
		} else {
			c.Enter("allreduce", 812)
		}
		if rank == os.Getenv("GORUN_TEST_FAIL") {
			// Fails: closes its client, as comm's Close after a failed
			// operation does, and exits 1.
			time.Sleep(1500 * time.Millisecond) // a report sent (about one a second)
			c.Close()
			return 1
		}
		time.Sleep(20 * time.Second)
		return 0
	case "freeze", "quiet":
		// Every rank reports that it joined; rank 1 then freezes itself
		// ("freeze": SIGSTOP, as a hung host) or keeps running and
		// reporting for 10 s ("quiet"); the others end at once.
		c := jobctl.FromEnv()
		r := mustAtoi(rank)
		c.Phase(r, "bootstrap")
		c.Joined(r)
		c.Phase(r, "ready")
		c.Enter("allreduce", 1)
		time.Sleep(1500 * time.Millisecond) // a report sent (about one a second)
		if r == 1 && mode == "freeze" {
			syscall.Kill(os.Getpid(), syscall.SIGSTOP)
		}
		if r == 1 {
			time.Sleep(10 * time.Second)
		}
		c.Leave()
		c.Close()
		return 0
	case "slow-join":
		c := jobctl.FromEnv()
		defer c.Close()
		r := mustAtoi(rank)
		c.Phase(r, "bootstrap")
		time.Sleep(time.Duration(r+1) * 600 * time.Millisecond)
		c.Phase(r, "connecting")
		time.Sleep(600 * time.Millisecond)
		c.Joined(r)
		c.Phase(r, "ready")
		time.Sleep(300 * time.Millisecond)
		return 0
	case "netns":
		return netnsRank()
	case "affinity":
		// Every thread's CPU list, deduplicated.
		seen := map[string]bool{}
		tasks, _ := filepath.Glob("/proc/self/task/*/status")
		for _, f := range tasks {
			b, _ := os.ReadFile(f)
			for _, l := range strings.Split(string(b), "\n") {
				if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:"); ok {
					seen[strings.TrimSpace(v)] = true
				}
			}
		}
		for v := range seen {
			fmt.Println(v)
		}
		return 0
	case "sleep":
		time.Sleep(20 * time.Second)
		return 0
	case "stop-signal":
		// Says "ready" on stderr once it handles SIGINT, SIGTERM and
		// SIGHUP, then "got" the first that comes, and exits 0.
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
		fmt.Fprintln(os.Stderr, "ready")
		select {
		case s := <-sigs:
			fmt.Fprintln(os.Stderr, "got", s)
			return 0
		case <-time.After(20 * time.Second):
			fmt.Fprintln(os.Stderr, "no signal")
			return 3
		}
	case "usr":
		// Says "ready" once it handles SIGUSR1 and SIGUSR2, then "got" each
		// of them as it comes, and exits 0 when it has had both; one that
		// comes twice is an error. On stderr: that is where a remote
		// rank's wrapper reports its process group, before the program
		// starts (marker.go), so gorun knows it once "ready" is out; and
		// on stdout, for a test that holds stderr back.
		sigs := make(chan os.Signal, 2)
		signal.Notify(sigs, syscall.SIGUSR1, syscall.SIGUSR2)
		fmt.Fprintln(os.Stderr, "ready")
		fmt.Println("ready")
		got := map[os.Signal]bool{}
		for len(got) < 2 {
			select {
			case s := <-sigs:
				fmt.Fprintln(os.Stderr, "got", s)
				if got[s] {
					return 1
				}
				got[s] = true
			case <-time.After(20 * time.Second):
				fmt.Fprintln(os.Stderr, "no signal after", got)
				return 3
			}
		}
		return 0
	case "exit-rank":
		// The rank GORUN_TEST_FAIL names (GORUN_RANK, or SLURM_PROCID
		// under srun) exits with status 7; the others with 0.
		if rank == "" {
			rank = os.Getenv("SLURM_PROCID")
		}
		if rank == os.Getenv("GORUN_TEST_FAIL") {
			return 7
		}
		return 0
	case "helper":
		// Starts a helper in the rank's process group, reports its pid
		// and exits 0 without waiting for it.
		h := exec.Command(os.Args[0])
		h.Env = append(os.Environ(), "GORUN_TEST_MODE=sleep")
		if err := h.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Println("helper", h.Process.Pid)
		return 0
	}
	fmt.Fprintf(os.Stderr, "fake rank: unknown mode %q\n", mode)
	return 99
}

// waitForFiles waits (at most 20s) until dir holds n files named prefix*.
func waitForFiles(dir, prefix string, n int) {
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if m, _ := filepath.Glob(filepath.Join(dir, prefix+"*")); len(m) >= n {
			return
		}
	}
}

func mustGetwd() string {
	d, _ := os.Getwd()
	return d
}

func mustAtoi(s string) int {
	var n int
	fmt.Sscan(s, &n)
	return n
}

// alive reports whether pid runs, from /proc (Linux): a zombie is dead,
// its descriptors closed; init may be slow to reap an orphan, or not reap
// it at all in a container.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(f) > 0 && f[0] != "Z"
}
