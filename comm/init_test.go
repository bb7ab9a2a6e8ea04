package comm

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/bootstrap"
	"github.com/gorun-hpc/gorun/internal/jobenv"
)

// The multi-process test re-runs this test binary as each rank, as
// os/exec's tests do: the child runs only TestInitChild, which does the
// rank's work when initChildEnv is set and is skipped otherwise.
const initChildEnv = "GORUN_INIT_TEST_CHILD"

func TestInitChild(t *testing.T) {
	mode := os.Getenv(initChildEnv)
	if mode == "" {
		t.Skip("run by TestInitProcesses and TestInitStoppedRank")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := Init(ctx)
	if err != nil {
		fmt.Printf("INIT ERROR: %v\n", err)
		t.Fatal(err)
	}
	defer c.Close()
	if mode == "stall" {
		stallChild(ctx, t, c)
		return
	}
	n := c.Size()
	vec := make([]float64, 1000)
	for i := range vec {
		vec[i] = float64((c.Rank() + 1) * (i + 1))
	}
	if err := AllReduce(ctx, c, vec, vec, Sum); err != nil {
		t.Fatalf("rank %d: allreduce: %v", c.Rank(), err)
	}
	for i, v := range vec {
		if want := float64(n * (n + 1) / 2 * (i + 1)); v != want {
			t.Fatalf("rank %d: element %d = %v, want %v", c.Rank(), i, v, want)
		}
	}
	fmt.Printf("RANK %d OF %d OK\n", c.Rank(), n)
	// Close only when every rank is done: the parent closes our stdin
	// once all ranks reported (a rank that closes early fails its peers'
	// pending operations with ErrPeerClosed).
	io.Copy(io.Discard, os.Stdin)
	if err := c.Close(); err != nil {
		t.Fatalf("rank %d: close: %v", c.Rank(), err)
	}
	fmt.Printf("RANK %d CLOSED\n", c.Rank())
}

// initFreePort finds a port free for TCP and UDP on 127.0.0.1.
func initFreePort(t *testing.T) int {
	t.Helper()
	for range 20 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		pc, err := net.ListenPacket("udp", "127.0.0.1:"+strconv.Itoa(port))
		ln.Close()
		if err == nil {
			pc.Close()
			return port
		}
	}
	t.Fatal("no free port for TCP and UDP")
	return 0
}

func initRandomID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// initCleanEnv is the environment without any launcher variables.
func initCleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "GORUN_") || strings.HasPrefix(k, "SLURM_") || strings.HasPrefix(k, "OMPI_") ||
			strings.HasPrefix(k, "PMI_") || strings.HasPrefix(k, "MPI_LOCAL") ||
			slices.Contains([]string{"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}, k) {
			continue
		}
		env = append(env, kv)
	}
	return env
}

func TestInitProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 4 processes")
	}
	const n = 4
	seed := "127.0.0.1:" + strconv.Itoa(initFreePort(t))
	common := append(initCleanEnv(), initChildEnv+"=1", "GORUN_SIZE="+strconv.Itoa(n), "GORUN_SEEDS="+seed,
		"GORUN_JOB_ID=init-test-"+initRandomID(), "GORUN_JOB_TOKEN="+initRandomID(), "GORUN_TIMEOUT=60s")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	start := time.Now()
	cmds, stdins, outs := startStdinRanks(t, ctx, n, common, "TestInitChild")
	// Wait until every rank reported its allreduce (or one exited), then
	// let them all close.
	exited := make(chan int, n)
	errs := make([]error, n)
	for r, cmd := range cmds {
		go func() { errs[r] = cmd.Wait(); exited <- r }()
	}
	ok := func(r int) bool { return strings.Contains(outs[r].String(), fmt.Sprintf("RANK %d OF %d OK", r, n)) }
	for waiting := true; waiting; {
		select {
		case r := <-exited:
			exited <- r // counted below
			waiting = false
		case <-time.After(20 * time.Millisecond):
			waiting = false
			for r := range n {
				waiting = waiting || !ok(r)
			}
		}
	}
	t.Logf("4 processes: Init + allreduce in %v", time.Since(start))
	for _, w := range stdins {
		w.Close()
	}
	for range n {
		<-exited
	}
	for r := range n {
		out := outs[r].String()
		if errs[r] != nil || !ok(r) || !strings.Contains(out, fmt.Sprintf("RANK %d CLOSED", r)) {
			t.Errorf("rank %d: %v\n%s", r, errs[r], out)
		}
	}
}

// initOutput collects a child's output while the test reads it.
type initOutput struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *initOutput) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *initOutput) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// initVars is a rank's environment as a getenv function.
func initVars(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func initRankVars(rank, size int, seed, job, token string) map[string]string {
	return map[string]string{"GORUN_RANK": strconv.Itoa(rank), "GORUN_SIZE": strconv.Itoa(size),
		"GORUN_SEEDS": seed, "GORUN_JOB_ID": job, "GORUN_JOB_TOKEN": token}
}

func TestInitMissingRank(t *testing.T) {
	seed := "127.0.0.1:" + strconv.Itoa(initFreePort(t))
	job, token := "missing-"+initRandomID(), initRandomID()
	errs := make([]error, 2)
	var wg sync.WaitGroup
	start := time.Now()
	for r := range 2 {
		wg.Go(func() {
			c, err := initFromEnv(context.Background(), initVars(initRankVars(r, 3, seed, job, token)), WithTimeout(2*time.Second))
			if err == nil {
				c.Close()
			}
			errs[r] = err
		})
	}
	wg.Wait()
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Init failed after %v with a 2s timeout", d)
	}
	for r, err := range errs {
		var fe *bootstrap.FormError
		if !errors.As(err, &fe) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("rank %d: err = %v, want a *bootstrap.FormError", r, err)
		}
		if !strings.Contains(err.Error(), "missing ranks [2]") || !slices.Equal(fe.Missing, []int{2}) {
			t.Errorf("rank %d: error does not name rank 2 as missing: %v", r, err)
		}
	}
}

// TestInitHonoursContext: as TestInitMissingRank, with the communicator's
// timeout left at its default (minutes) and a 300 ms context instead: Init
// returns when the context ends.
func TestInitHonoursContext(t *testing.T) {
	seed := "127.0.0.1:" + strconv.Itoa(initFreePort(t))
	job, token := "init-ctx-"+initRandomID(), initRandomID()
	ctx, cancel := context.WithTimeout(initTestCtx(t), 300*time.Millisecond)
	defer cancel()
	errs := make(chan error, 2)
	for r := range 2 { // rank 2 of 3 never starts
		go func() {
			c, err := initFromEnv(ctx, initVars(initRankVars(r, 3, seed, job, token)))
			if err == nil {
				c.Close()
			}
			errs <- err
		}()
	}
	limit := time.After(10 * time.Second) // a hang, not a slow machine: the context ends after 300 ms
	for range 2 {
		select {
		case err := <-errs:
			var fe *bootstrap.FormError
			if !errors.As(err, &fe) || !errors.Is(err, context.DeadlineExceeded) || !slices.Equal(fe.Missing, []int{2}) {
				t.Fatalf("Init whose context ended: %v, want a *bootstrap.FormError naming rank 2 as missing, wrapping context.DeadlineExceeded", err)
			}
		case <-limit:
			t.Fatal("Init did not return 10 s after its 300 ms context ended")
		}
	}
}

func TestInitWrongTokenRefused(t *testing.T) {
	seed := "127.0.0.1:" + strconv.Itoa(initFreePort(t))
	job, token := "token-"+initRandomID(), initRandomID()
	// Rank 1 twice: the impostor has the job id but not the token.
	envs := []map[string]string{
		initRankVars(0, 2, seed, job, token),
		initRankVars(1, 2, seed, job, token),
		initRankVars(1, 2, seed, job, "not-"+token),
	}
	comms := make([]*Comm, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i, vars := range envs {
		wg.Go(func() {
			timeout := 20 * time.Second
			if i == 2 {
				timeout = 2 * time.Second
			}
			comms[i], errs[i] = initFromEnv(context.Background(), initVars(vars), WithTimeout(timeout))
		})
	}
	wg.Wait()
	for _, c := range comms {
		if c != nil {
			defer c.Close()
		}
	}
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("the job's ranks: %v; %v", errs[0], errs[1])
	}
	if !errors.Is(errs[2], bootstrap.ErrNotFormed) {
		t.Errorf("impostor: err = %v, want ErrNotFormed", errs[2])
	}
	ctx := initTestCtx(t)
	for _, c := range comms[:2] {
		wg.Go(func() {
			v := []int64{int64(c.Rank() + 1)}
			if err := AllReduce(ctx, c, v, v, Sum); err != nil {
				t.Errorf("rank %d: allreduce: %v", c.Rank(), err)
			} else if v[0] != 3 {
				t.Errorf("rank %d: sum = %d, want 3", c.Rank(), v[0])
			}
		})
	}
	wg.Wait()
}

func TestInitSingleton(t *testing.T) {
	c, err := initFromEnv(initTestCtx(t), initVars(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Rank() != 0 || c.Size() != 1 {
		t.Errorf("rank %d of %d, want 0 of 1", c.Rank(), c.Size())
	}
}

func TestSeedsFromLaunchers(t *testing.T) {
	cases := []struct {
		vars map[string]string
		want []string
	}{
		{map[string]string{"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"},
			[]string{"10.0.0.1:29501"}},
		{map[string]string{"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500",
			"GORUN_SEEDS": "h:1,g:2"}, []string{"h:1", "g:2"}},
		{map[string]string{"SLURM_PROCID": "3", "SLURM_NTASKS": "8", "SLURM_NODELIST": "node[07-09,12],gpu1",
			"SLURM_JOB_ID": "123456"}, []string{"node07:23456"}},
		{map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_NODELIST": "a,b", "SLURM_JOB_ID": "7"},
			[]string{"a:20007"}},
		{map[string]string{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"}, nil},
	}
	// torchrun's port must leave room for the seed's.
	if _, err := readJobEnv(initVars(map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "65535"})); err == nil || !strings.Contains(err.Error(), "MASTER_PORT") {
		t.Errorf("MASTER_PORT=65535: err = %v, want one naming MASTER_PORT", err)
	}
	for _, tc := range cases {
		job, err := readJobEnv(initVars(tc.vars))
		if err != nil {
			t.Fatalf("%v: %v", tc.vars, err)
		}
		if got := seedsFor(job); !slices.Equal(got, tc.want) {
			t.Errorf("%v: seeds %v, want %v", tc.vars, got, tc.want)
		}
	}
	// Open MPI without GORUN_SEEDS: a clear error, not a hang.
	_, err := initFromEnv(initTestCtx(t), initVars(map[string]string{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"}))
	if err == nil || !strings.Contains(err.Error(), "GORUN_SEEDS") {
		t.Errorf("Open MPI without seeds: err = %v", err)
	}
}

func TestFirstHost(t *testing.T) {
	for list, want := range map[string]string{
		"node[07-09,12],gpu1": "node07", "node[1-2]-ib": "node1-ib", "a,b": "a", "single": "single", "n[3]": "n3", "x[1,2]": "x1", "": "",
	} {
		if got := jobenv.FirstHost(list); got != want {
			t.Errorf("firstHost(%q) = %q, want %q", list, got, want)
		}
	}
}

func initTestCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// stallChild: report READY, wait for a line on stdin (the parent stops the
// last rank with SIGSTOP meanwhile), then run an allreduce that needs the
// stopped rank and report how it failed.
func stallChild(ctx context.Context, t *testing.T, c *Comm) {
	fmt.Printf("READY %d\n", c.Rank())
	if c.Rank() == c.Size()-1 {
		select {} // stopped, then killed, by the parent
	}
	var line [1]byte
	os.Stdin.Read(line[:])
	start := time.Now()
	v := []float32{1, 2, 3}
	err := AllReduce(ctx, c, v, v, Sum)
	var re *RankError
	if errors.As(err, &re) && errors.Is(err, ErrPeerFailed) {
		fmt.Printf("FAILED rank=%d after %v: %v\n", re.Rank, time.Since(start).Round(time.Millisecond), err)
	} else {
		fmt.Printf("UNEXPECTED %v\n", err)
	}
}

// TestInitStoppedRank checks the gossip failure detector end to end: a
// rank that stops (SIGSTOP keeps its sockets open, so the transport sees
// nothing) is declared dead by the bootstrap, and the others' pending
// allreduce fails with ErrPeerFailed naming it, within seconds.
func TestInitStoppedRank(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 3 processes")
	}
	const n = 3
	seed := "127.0.0.1:" + strconv.Itoa(initFreePort(t))
	common := append(initCleanEnv(), initChildEnv+"=stall", "GORUN_SIZE="+strconv.Itoa(n), "GORUN_SEEDS="+seed,
		"GORUN_JOB_ID=stall-test-"+initRandomID(), "GORUN_JOB_TOKEN="+initRandomID(), "GORUN_TIMEOUT=60s")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmds, stdins, outs := startStdinRanks(t, ctx, n, common, "TestInitChild")
	defer func() {
		for _, cmd := range cmds {
			cmd.Process.Kill()
			cmd.Wait()
		}
	}()
	waitFor := func(what string, d time.Duration, cond func() bool) {
		t.Helper()
		for end := time.Now().Add(d); !cond(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(end) {
				for r := range n {
					t.Logf("rank %d:\n%s", r, outs[r].String())
				}
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	waitFor("READY", 30*time.Second, func() bool {
		for r := range n {
			if !strings.Contains(outs[r].String(), fmt.Sprintf("READY %d", r)) {
				return false
			}
		}
		return true
	})
	if err := cmds[n-1].Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	for r := range n - 1 {
		stdins[r].Write([]byte("\n"))
	}
	start := time.Now()
	waitFor("the failure reports", 20*time.Second, func() bool {
		for r := range n - 1 {
			if !strings.Contains(outs[r].String(), "FAILED") && !strings.Contains(outs[r].String(), "UNEXPECTED") {
				return false
			}
		}
		return true
	})
	t.Logf("stopped rank reported after %v", time.Since(start))
	for r := range n - 1 {
		if out := outs[r].String(); !strings.Contains(out, fmt.Sprintf("FAILED rank=%d", n-1)) {
			t.Errorf("rank %d:\n%s", r, out)
		}
	}
}

// TestInitTorchrun: torchrun's variables alone form the job; rank 0's
// gossip port is MASTER_PORT+1.
func TestInitTorchrun(t *testing.T) {
	port := initFreePort(t)
	comms := make([]*Comm, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		vars := map[string]string{"RANK": strconv.Itoa(r), "WORLD_SIZE": "2", "LOCAL_RANK": strconv.Itoa(r),
			"LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": strconv.Itoa(port - 1),
			"TORCHELASTIC_RUN_ID": "torch-" + strconv.Itoa(port)}
		wg.Go(func() {
			comms[r], errs[r] = initFromEnv(initTestCtx(t), initVars(vars), WithTimeout(20*time.Second))
		})
	}
	wg.Wait()
	for r, c := range comms {
		if c != nil {
			defer c.Close()
		}
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
		if c.Rank() != r || c.Size() != 2 {
			t.Errorf("rank %d: got rank %d of %d", r, c.Rank(), c.Size())
		}
	}
}

func TestGossipIP(t *testing.T) {
	for seed, want := range map[string]string{"127.0.0.1:5": "127.0.0.1", "localhost:5": "127.0.0.1", "[::1]:5": "::1", "127.0.0.9:5": "127.0.0.9"} {
		if got, err := gossipIP(seed, ""); err != nil || got != want {
			t.Errorf("gossipIP(%q) = %q, %v; want %q", seed, got, err, want)
		}
	}
	if _, err := gossipIP("no-port", ""); err == nil {
		t.Error("gossipIP accepted a seed without a port")
	}
}

// TestInitMissingRankProcesses: ranks 0 and 1 of a job of 3 start as
// processes, rank 2 never does; both fail within GORUN_TIMEOUT with an
// error that names rank 2 as missing.
func TestInitMissingRankProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 2 processes")
	}
	seed := "127.0.0.1:" + strconv.Itoa(initFreePort(t))
	common := append(initCleanEnv(), initChildEnv+"=1", "GORUN_SIZE=3", "GORUN_SEEDS="+seed,
		"GORUN_JOB_ID=missing-"+initRandomID(), "GORUN_JOB_TOKEN="+initRandomID(), "GORUN_TIMEOUT=2s")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Go(func() {
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestInitChild$", "-test.v")
			cmd.Env = append(slices.Clone(common), "GORUN_RANK="+strconv.Itoa(r))
			out, err := cmd.CombinedOutput()
			if err == nil || !strings.Contains(string(out), "INIT ERROR") || !strings.Contains(string(out), "missing ranks [2]") {
				t.Errorf("rank %d: %v\n%s", r, err, out)
			}
		})
	}
	wg.Wait()
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("ranks gave up after %v with GORUN_TIMEOUT=2s", d)
	}
}

// startStdinRanks starts n ranks of this test binary running the test
// child, each with common plus its GORUN_RANK, its output captured and
// its stdin a pipe the test writes to (to release or stop it).
func startStdinRanks(t *testing.T, ctx context.Context, n int, common []string, child string) ([]*exec.Cmd, []io.WriteCloser, []initOutput) {
	t.Helper()
	outs := make([]initOutput, n)
	cmds := make([]*exec.Cmd, n)
	stdins := make([]io.WriteCloser, n)
	for r := range n {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+child+"$", "-test.v")
		cmd.Env = append(slices.Clone(common), "GORUN_RANK="+strconv.Itoa(r))
		cmd.Stdout, cmd.Stderr = &outs[r], &outs[r]
		var err error
		if stdins[r], err = cmd.StdinPipe(); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[r] = cmd
	}
	return cmds, stdins, outs
}

// A rank that serves the job's gossip seed at a port another process
// holds fails its Init at once with an error that names the seed and the
// launcher's way to choose another port (gorun: --gossip-port), and
// wraps ErrSeedPortInUse; the bind's own words follow. Before, it
// said only "bind: address already in use" (a seed port drawn at random
// for a rank 0 on another host: TestCluster/3x1 in CI, 2026-12-03).
func TestInitSeedPortInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	seed := ln.Addr().String()
	start := time.Now()
	c, err := initFromEnv(context.Background(), initVars(initRankVars(0, 2, seed, "in-use-"+initRandomID(), initRandomID())), WithTimeout(20*time.Second))
	if err == nil {
		c.Close()
		t.Fatalf("Init of rank 0 with its seed port %s held: no error", seed)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Init failed after %v; want at once", d)
	}
	var re *RankError
	if !errors.Is(err, ErrSeedPortInUse) || !errors.As(err, &re) || re.Rank != 0 {
		t.Errorf("err = %v; want a RankError naming rank 0 that wraps ErrSeedPortInUse", err)
	}
	for _, want := range []string{"gossip seed " + seed, "gorun --gossip-port PORT", "address already in use"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v; want it to say %q", err, want)
		}
	}
}
