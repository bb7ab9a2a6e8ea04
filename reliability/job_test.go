package reliability

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	mrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// childEnv selects the rank program a re-run of the test binary runs.
const childEnv = "GORUN_RELIABILITY_CHILD"

func TestMain(m *testing.M) {
	if filepath.Base(os.Args[0]) == "ssh" {
		os.Exit(fakeSSH(os.Args[1:]))
	}
	if role := os.Getenv(childEnv); role != "" {
		os.Exit(runChild(role))
	}
	os.Exit(m.Run())
}

// event is one line a rank program reports on stdout ("RELEVENT {json}").
type event struct {
	Kind       string `json:"kind"` // ready, error, done, wrong, after
	Rank       int    `json:"rank"`
	T          int64  `json:"t"` // wall clock, Unix nanoseconds
	Iter       int    `json:"iter,omitempty"`
	Err        string `json:"err,omitempty"`
	ErrRank    int    `json:"err_rank"`               // the rank a *comm.RankError names
	Leak       string `json:"leak,omitempty"`         // after Close: what was not given back
	LeakWaitMS int64  `json:"leak_wait_ms,omitempty"` // how long until everything was given back
	Reinit     string `json:"reinit,omitempty"`
}

const eventPrefix = "RELEVENT "

// jobSpec describes a job of rank programs.
type jobSpec struct {
	n         int
	role      string
	transport string        // GORUN_TRANSPORT
	timeout   time.Duration // GORUN_TIMEOUT
	env       []string      // for every rank
	rankEnv   map[int][]string
	wrap      func(rank int) []string // argv prefix per rank (e.g. ip netns exec)
	seedHost  string                  // default 127.0.0.1
	seedPort  int                     // default: a free port on seedHost (which must be local)
}

// rank is one running rank program.
type rank struct {
	id     int
	cmd    *exec.Cmd
	stderr bytes.Buffer
	exited chan struct{}
	exitAt time.Time
	mu     sync.Mutex
	events []event
	notify chan struct{} // a new event arrived (capacity 1)
}

// job is a running job.
type job struct {
	t     testing.TB
	spec  jobSpec
	ranks []*rank
	dir   string // TMPDIR of the ranks (their shm sockets live there)

	common []string // every rank's environment
	self   string
	old    []*rank // replaced by restart
}

// waitReady waits until every rank of j has reported "ready", and fails
// the test with the job's logs if one never does before ctx ends.
func (j *job) waitReady(ctx context.Context) {
	j.t.Helper()
	for _, rk := range j.ranks {
		if _, ok := rk.waitEvent(ctx, "ready"); !ok {
			j.t.Fatalf("rank %d never ready\n%s", rk.id, j.logs())
		}
	}
}

var selfPath = sync.OnceValues(os.Executable)

// seedPorts hands out seed ports in turn from a random start, below the
// kernel's ephemeral range (32768-60999 by default): a port the kernel
// handed out and took back could be handed to another process's
// connection or port-0 listener before this job's seed binds it. In turn,
// not drawn: the kill trials run four jobs at once, and a port drawn for
// each is a port two of them can both find free before either seed binds
// it (CI, 2026-11-29: a trial's rank 0 failed to bind 127.0.0.1:21869,
// "address already in use", with nothing but this package's jobs running).
var seedPorts = struct {
	sync.Mutex
	next int // offset from seedPortLow
}{next: mrand.IntN(seedPortSpan)}

const seedPortLow, seedPortSpan = 20000, 12000

// freePort finds a port free for TCP and UDP on host (the gossip seed),
// one no other job of this process was given since the last 12,000.
func freePort(host string) (int, error) {
	var err error
	for range 50 {
		seedPorts.Lock()
		port := seedPortLow + seedPorts.next
		seedPorts.next = (seedPorts.next + 1) % seedPortSpan
		seedPorts.Unlock()
		var ln net.Listener
		if ln, err = net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port))); err != nil {
			continue
		}
		pc, uerr := net.ListenPacket("udp", net.JoinHostPort(host, strconv.Itoa(port)))
		ln.Close()
		if uerr != nil {
			err = uerr
			continue
		}
		pc.Close()
		return port, nil
	}
	return 0, err
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// baseEnv is this process's environment without any job or GORUN_ variable.
func baseEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(name, "GORUN_"), strings.HasPrefix(name, "OMPI_"),
			strings.HasPrefix(name, "SLURM_"), name == "RANK", name == "WORLD_SIZE",
			name == "LOCAL_RANK", name == "MASTER_ADDR", name == "MASTER_PORT",
			name == "XDG_RUNTIME_DIR", name == "TMPDIR":
			continue
		}
		env = append(env, kv)
	}
	return env
}

// startJob starts spec.n rank programs; they are killed and reaped when
// the test ends if they have not exited by then.
func startJob(t testing.TB, spec jobSpec) *job {
	t.Helper()
	self, err := selfPath()
	if err != nil {
		t.Fatal(err)
	}
	host := spec.seedHost
	if host == "" {
		host = "127.0.0.1"
	}
	port := spec.seedPort
	if port == 0 {
		var err error
		if port, err = freePort(host); err != nil {
			t.Fatalf("no free seed port: %v", err)
		}
	}
	if spec.timeout == 0 {
		spec.timeout = 5 * time.Second
	}
	j := &job{t: t, spec: spec, dir: t.TempDir()}
	common := append(baseEnv(),
		childEnv+"="+spec.role,
		"TMPDIR="+j.dir,
		"GORUN_SIZE="+strconv.Itoa(spec.n),
		"GORUN_SEEDS="+net.JoinHostPort(host, strconv.Itoa(port)),
		"GORUN_JOB_ID=rel-"+randomHex(6),
		"GORUN_JOB_TOKEN="+randomHex(16),
		"GORUN_TIMEOUT="+spec.timeout.String(),
	)
	if spec.transport != "" {
		common = append(common, "GORUN_TRANSPORT="+spec.transport)
	}
	// Info-level logs (formation, connections, failures, shrinks: a few
	// lines a rank, none per operation), so that a failure's logs
	// (j.logs, rk.log) say what each rank saw; a spec's own GORUN_DEBUG
	// comes later and wins.
	common = append(common, "GORUN_DEBUG=info")
	common = append(common, spec.env...)
	j.common, j.self = common, self
	for r := range spec.n {
		j.ranks = append(j.ranks, j.startRank(r))
	}
	t.Cleanup(j.kill)
	return j
}

// startRank starts rank r's program with the job's environment and extra.
func (j *job) startRank(r int, extra ...string) *rank {
	t, spec := j.t, j.spec
	argv := []string{j.self, "-test.run=^$"}
	if spec.wrap != nil {
		argv = append(spec.wrap(r), argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(append(append(slices.Clone(j.common), "GORUN_RANK="+strconv.Itoa(r)), spec.rankEnv[r]...), extra...)
	rk := &rank{id: r, cmd: cmd, exited: make(chan struct{}), notify: make(chan struct{}, 1)}
	cmd.Stderr = &lockedWriter{w: &rk.stderr, mu: &rk.mu}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start rank %d: %v", r, err)
	}
	read := make(chan struct{})
	go func() {
		defer close(read)
		rk.read(out)
	}()
	go func() {
		<-read // Wait closes the pipe: read it to the end first
		cmd.Wait()
		rk.mu.Lock()
		rk.exitAt = time.Now()
		rk.mu.Unlock()
		close(rk.exited)
	}()
	return rk
}

// restart starts rank r again (its old process must be gone), with extra
// environment; it replaces j.ranks[r] and is killed with the job.
// add starts one more rank, numbered after the others, with the job's
// environment (a rank launched to grow the job).
func (j *job) add(extra ...string) *rank {
	rk := j.startRank(len(j.ranks), extra...)
	j.ranks = append(j.ranks, rk)
	return rk
}

func (j *job) restart(r int, extra ...string) *rank {
	j.old = append(j.old, j.ranks[r])
	j.ranks[r] = j.startRank(r, extra...)
	return j.ranks[r]
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (rk *rank) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		s, ok := strings.CutPrefix(line, eventPrefix)
		if !ok {
			rk.mu.Lock()
			fmt.Fprintln(&rk.stderr, "stdout:", line)
			rk.mu.Unlock()
			continue
		}
		var ev event
		if err := json.Unmarshal([]byte(s), &ev); err != nil {
			continue
		}
		rk.mu.Lock()
		rk.events = append(rk.events, ev)
		if ev.Kind == "error" {
			// In the log too: a failure message that shows a rank's
			// stderr then says why it ended.
			fmt.Fprintln(&rk.stderr, "event:", s)
		}
		rk.mu.Unlock()
		select {
		case rk.notify <- struct{}{}:
		default:
		}
	}
}

// event returns the first event of kind, if any.
func (rk *rank) event(kind string) (event, bool) {
	rk.mu.Lock()
	defer rk.mu.Unlock()
	for _, e := range rk.events {
		if e.Kind == kind {
			return e, true
		}
	}
	return event{}, false
}

// waitEvent waits for an event of kind, or for the rank to exit, or ctx.
func (rk *rank) waitEvent(ctx context.Context, kind string) (event, bool) {
	for {
		if e, ok := rk.event(kind); ok {
			return e, true
		}
		select {
		case <-rk.notify:
		case <-rk.exited:
			return rk.event(kind)
		case <-ctx.Done():
			return event{}, false
		}
	}
}

// exit waits for the rank to exit, up to d; ok is false if it did not.
func (rk *rank) exit(d time.Duration) (st *os.ProcessState, at time.Time, ok bool) {
	select {
	case <-rk.exited:
		rk.mu.Lock()
		defer rk.mu.Unlock()
		return rk.cmd.ProcessState, rk.exitAt, true
	case <-time.After(d):
		return nil, time.Time{}, false
	}
}

func (rk *rank) log() string {
	rk.mu.Lock()
	defer rk.mu.Unlock()
	return rk.stderr.String()
}

func (rk *rank) signal(sig syscall.Signal) error { return rk.cmd.Process.Signal(sig) }

// killedBy reports the signal that ended st, or 0.
func killedBy(st *os.ProcessState) syscall.Signal {
	if st == nil {
		return 0
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return ws.Signal()
	}
	return 0
}

// kill ends every rank still running and reaps it.
func (j *job) kill() {
	for _, rk := range append(slices.Clone(j.ranks), j.old...) {
		select {
		case <-rk.exited:
		default:
			rk.cmd.Process.Kill()
			<-rk.exited
		}
	}
	j.t.Helper()
	checkLeftovers(j.t, j.dir)
}

// checkLeftovers fails the test if a job whose ranks are all gone (killed,
// failed or done) left anything behind: a file in dir, the ranks' TMPDIR
// (shm sockets were once left there as gorun-<uid>/shm-PID-*.sock), or a
// gorun entry in /dev/shm.
func checkLeftovers(t testing.TB, dir string) {
	t.Helper()
	if ents, err := os.ReadDir(dir); err == nil && len(ents) > 0 {
		var names []string
		filepath.WalkDir(dir, func(p string, _ fs.DirEntry, _ error) error {
			if p != dir {
				names = append(names, strings.TrimPrefix(p, dir+"/"))
			}
			return nil
		})
		t.Errorf("the job left %v in its TMPDIR %s", names, dir)
	}
	if ents, err := os.ReadDir("/dev/shm"); err == nil {
		for _, e := range ents {
			if strings.Contains(e.Name(), "gorun") {
				t.Errorf("/dev/shm/%s left behind", e.Name())
			}
		}
	}
}

// logs is every rank's events and stderr, for failure messages.
func (j *job) logs() string {
	var b strings.Builder
	for _, rk := range j.ranks {
		rk.mu.Lock()
		evs := slices.Clone(rk.events)
		rk.mu.Unlock()
		fmt.Fprintf(&b, "--- rank %d:\n", rk.id)
		for _, e := range evs {
			fmt.Fprintf(&b, "event %s %s iter %d %s\n", time.Unix(0, e.T).UTC().Format("15:04:05.000"), e.Kind, e.Iter, e.Err)
		}
		b.WriteString(rk.log())
	}
	return b.String()
}
