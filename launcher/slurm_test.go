package launcher

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// fakeSrun understands "srun -n N --kill-on-bad-exit=1 [--label] PROG
// ARGS...": it starts N copies with SLURM_PROCID set and labels their
// output "RANK: " as srun does.
func fakeSrun(args []string) int {
	if len(args) < 4 || args[0] != "-n" || args[2] != "--kill-on-bad-exit=1" {
		fmt.Fprintf(os.Stderr, "fake srun: unexpected arguments %q\n", args)
		return 1
	}
	if want := os.Getenv("GORUN_TEST_SRUN_BIND"); want != "" {
		if args[3] != want {
			fmt.Fprintf(os.Stderr, "fake srun: got %q, want %s\n", args[3], want)
			return 1
		}
		args = append(args[:3], args[4:]...)
	}
	for i := 3; i < len(args); i++ { // --npernode: TestSrunArgv
		if strings.HasPrefix(args[i], "--ntasks-per-node=") {
			args = append(args[:i:i], args[i+1:]...)
		}
	}
	n, _ := strconv.Atoi(args[1])
	label := args[3] == "--label"
	prog := args[3:]
	if label {
		prog = args[4:]
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	status := 0
	for i := 0; i < n; i++ {
		cmd := exec.Command(prog[0], prog[1:]...)
		cmd.Env = append(os.Environ(), fmt.Sprintf("SLURM_PROCID=%d", i), fmt.Sprintf("SLURM_NTASKS=%d", n))
		out, err := cmd.StdoutPipe()
		if err != nil {
			return 1
		}
		errOut, err := cmd.StderrPipe()
		if err != nil || cmd.Start() != nil {
			return 1
		}
		// Stderr as it comes, labelled too, as srun --label does.
		errDone := make(chan struct{})
		go func() {
			defer close(errDone)
			sc := bufio.NewScanner(errOut)
			for sc.Scan() {
				mu.Lock()
				if label {
					fmt.Fprintf(os.Stderr, "%d: ", i)
				}
				fmt.Fprintln(os.Stderr, sc.Text())
				mu.Unlock()
			}
		}()
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, _ := readAll(out)
			<-errDone
			err := cmd.Wait()
			mu.Lock()
			defer mu.Unlock()
			for _, l := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
				if label {
					fmt.Printf("%d: ", i)
				}
				fmt.Println(l)
			}
			if err != nil {
				status = 1
			}
		}()
	}
	wg.Wait()
	return status
}

func readAll(f interface{ Read([]byte) (int, error) }) ([]byte, error) {
	var b []byte
	buf := make([]byte, 4096)
	for {
		n, err := f.Read(buf)
		b = append(b, buf[:n]...)
		if err != nil {
			return b, nil
		}
	}
}

func TestSrunInsideSlurm(t *testing.T) {
	bin := t.TempDir()
	if err := os.Symlink(testBinary(t), filepath.Join(bin, "srun")); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv("SLURM_JOB_ID", "4242")
	t.Setenv("SLURM_JOB_NODELIST", "127.0.0.[1-2]")
	t.Setenv("GORUN_TEST_SRUN_BIND", "--cpu-bind=cores")
	cfg := Config{NP: 2, GossipPort: 29500, Bind: "core"}
	cfg.Program = testBinary(t)
	cfg.Export = []string{"GORUN_TEST_ROLE=rank", "GORUN_TEST_MODE=env"}
	var out, errb strings.Builder
	cfg.Stdout, cfg.Stderr = &out, &errb
	if err := Run(t.Context(), cfg); err != nil {
		t.Fatalf("Run: %v\n%s", err, errb.String())
	}
	byRank := map[string][]string{}
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		r, kv, ok := strings.Cut(l, ": ")
		if !ok {
			t.Fatalf("unlabelled line %q", l)
		}
		byRank[r] = append(byRank[r], kv)
	}
	if len(byRank) != 2 {
		t.Fatalf("output of %d ranks:\n%s", len(byRank), out.String())
	}
	for r, kvs := range byRank {
		sort.Strings(kvs)
		env := strings.Join(kvs, "\n") + "\n"
		for _, want := range []string{"GORUN_SEEDS=127.0.0.1:29500\n", "SLURM_PROCID=" + r + "\n", "GORUN_CONTROL=127.0.0.1:"} {
			if !strings.Contains(env, want) {
				t.Errorf("rank %s lacks %q:\n%s", r, want, env)
			}
		}
		if strings.Contains(env, "GORUN_RANK=") || strings.Contains(env, "GORUN_SIZE=") {
			t.Errorf("rank %s got GORUN_RANK/GORUN_SIZE under srun:\n%s", r, env)
		}
		// This machine's CPU count is no business of the nodes srun uses:
		// comm.Init shares out each node's own.
		if strings.Contains(env, "GORUN_GOMAXPROCS=") {
			t.Errorf("rank %s got gorun's GOMAXPROCS under srun:\n%s", r, env)
		}
	}
}

// fakeSlurm puts the fake srun on PATH inside a pretend allocation.
func fakeSlurm(t *testing.T) {
	t.Helper()
	bin := t.TempDir()
	if err := os.Symlink(testBinary(t), filepath.Join(bin, "srun")); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv("SLURM_JOB_ID", "4242")
	t.Setenv("SLURM_JOB_NODELIST", "127.0.0.1")
}

func srunJob(t *testing.T, mode string, cfg Config) (string, string, error) {
	t.Helper()
	cfg.Program = testBinary(t)
	cfg.Export = append([]string{"GORUN_TEST_ROLE=rank", "GORUN_TEST_MODE=" + mode}, cfg.Export...)
	var out, errb strings.Builder
	cfg.Stdout, cfg.Stderr = &out, &errb
	err := Run(t.Context(), cfg)
	return out.String(), errb.String(), err
}

// Under srun, gorun names the task that failed and its status, from the
// task wrapper's marker; srun itself says only that one did.
func TestSrunNamesFailedTask(t *testing.T) {
	fakeSlurm(t)
	_, stderr, err := srunJob(t, "exit-rank", Config{NP: 3, Export: []string{"GORUN_TEST_FAIL=1"}})
	var re *RankError
	if !errors.As(err, &re) || re.Rank != 1 || re.ExitCode != 7 || ExitStatus(err) != 7 {
		t.Fatalf("Run = %v, want rank 1 with status 7\n%s", err, stderr)
	}
	if strings.Contains(stderr, "gorun:") && !strings.Contains(stderr, "gorun: rank 1 exited with status 7") || strings.Contains(stderr, "\x1e") {
		t.Errorf("stderr:\n%q", stderr)
	}
}

// --output-filename under srun: one log per task, from srun's labels.
func TestSrunOutputFilename(t *testing.T) {
	fakeSlurm(t)
	dir := filepath.Join(t.TempDir(), "logs")
	out, stderr, err := srunJob(t, "env", Config{NP: 2, OutputDir: dir})
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, stderr)
	}
	for r := range 2 {
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("rank.%d", r), "stdout"))
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("SLURM_PROCID=%d\n", r); !strings.Contains(string(b), want) || strings.Contains(string(b), ": ") {
			t.Errorf("rank.%d/stdout lacks %q or has labels:\n%s", r, want, b)
		}
	}
	if !strings.Contains(out, "1: SLURM_PROCID=1") {
		t.Errorf("console lost the labelled lines:\n%s", out)
	}
	if _, _, err := srunJob(t, "env", Config{NP: 2, OutputDir: dir, NoTag: true}); !errors.Is(err, ErrUsage) {
		t.Errorf("--output-filename with --tag-output=false under srun: %v, want a usage error", err)
	}
}

// -wdir and --npernode reach srun's tasks.
func TestSrunArgv(t *testing.T) {
	a := srunArgv(Config{NP: 4, NPerNode: 2, WorkDir: "/w d", Program: "p", Args: []string{"x"}}, "p")
	got := strings.Join(a, "|")
	if !strings.Contains(got, "|--ntasks-per-node=2|") || !strings.HasSuffix(got, "|sh|/w d|p|x") {
		t.Errorf("srun argv %q", a)
	}
	t.Setenv("SLURM_JOB_NUM_NODES", "3")
	cfg, err := perNode(Config{NPerNode: 2}, true)
	if err != nil || cfg.NP != 6 || len(cfg.Hosts) != 0 {
		t.Errorf("-N 2 in a 3-node allocation: NP %d, hosts %v, %v; want 6 ranks placed by srun", cfg.NP, cfg.Hosts, err)
	}
}

// --srun yes outside an allocation, or without srun, is a usage error
// that says which: gorun places ranks only in an allocation it is given.
func TestSrunYesNeedsAllocation(t *testing.T) {
	withSrun := t.TempDir()
	if err := os.Symlink(testBinary(t), filepath.Join(withSrun, "srun")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		job, path string
		want      []string
	}{
		{"", withSrun, []string{"no Slurm allocation (SLURM_JOB_ID is unset"}},
		{"4242", t.TempDir(), []string{"srun is not on PATH"}},
		{"", t.TempDir(), []string{"SLURM_JOB_ID is unset", "srun is not on PATH"}},
	} {
		t.Setenv("SLURM_JOB_ID", tc.job)
		t.Setenv("PATH", tc.path)
		_, err := useSrun(Config{UseSrun: "yes"})
		if !errors.Is(err, ErrUsage) || ExitStatus(err) != StatusUsage {
			t.Errorf("SLURM_JOB_ID=%q PATH=%s: %v, want a usage error", tc.job, tc.path, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("SLURM_JOB_ID=%q PATH=%s: %v, want it to say %q", tc.job, tc.path, err, w)
			}
		}
	}
	t.Setenv("SLURM_JOB_ID", "4242")
	t.Setenv("PATH", withSrun)
	if ok, err := useSrun(Config{UseSrun: "yes"}); !ok || err != nil {
		t.Errorf("--srun yes in an allocation with srun: %v, %v", ok, err)
	}
}

// Without -np, a job inside a Slurm allocation runs one rank per task of
// it, as srun and mpirun do there (one per node when the allocation
// names no task count, as srun); elsewhere -np is a usage error.
func TestSrunDefaultNP(t *testing.T) {
	fakeSlurm(t)
	t.Setenv("SLURM_NTASKS", "3")
	out, stderr, err := srunJob(t, "env", Config{})
	if err != nil {
		t.Fatalf("Run without -np in a 3-task allocation: %v\n%s", err, stderr)
	}
	for r := range 4 {
		if has := strings.Contains(out, fmt.Sprintf("%d: SLURM_PROCID=%d\n", r, r)); has != (r < 3) {
			t.Errorf("rank %d ran: %v, want %v\n%s", r, has, r < 3, out)
		}
	}
	t.Setenv("SLURM_NTASKS", "")
	t.Setenv("SLURM_JOB_NUM_NODES", "2")
	if cfg, err := defaultNP(Config{}, true); err != nil || cfg.NP != 2 {
		t.Errorf("no task count, 2 nodes: NP %d, %v; want 2", cfg.NP, err)
	}
	if _, _, err := runJob(t, "env", Config{}); !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), "-np is required") {
		t.Errorf("Run without -np outside Slurm: %v, want a usage error", err)
	}
}
