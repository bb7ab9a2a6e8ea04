package comm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Close with a frozen or a dead peer, in real processes started through
// Init (gossip, the launcher's environment): the test binary re-runs itself
// as each rank (TestCloseChild).

const closeChildEnv = "GORUN_CLOSE_TEST_CHILD" // "busy": close while an allreduce waits on the stopped rank; "idle": close with nothing running

// TestCloseChild is one rank of TestCloseFrozenPeer and TestCloseDeadPeer.
// The last rank only waits (the parent stops or kills it). The others
// report READY, wait for a line on stdin, then close (mode busy: while an
// allreduce that needs the last rank is waiting) with a context of
// GORUN_CLOSE_TEST_CTX, and report how Close and the allreduce ended.
func TestCloseChild(t *testing.T) {
	mode := os.Getenv(closeChildEnv)
	if mode == "" {
		t.Skip("run by TestCloseFrozenPeer and TestCloseDeadPeer")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	c, err := Init(ctx)
	if err != nil {
		fmt.Printf("INIT ERROR: %v\n", err)
		t.Fatal(err)
	}
	v := []float32{1}
	if err := AllReduce(ctx, c, v, v, Sum); err != nil || v[0] != float32(c.Size()) {
		fmt.Printf("WARMUP ERROR: %v %v\n", err, v)
		t.Fatal(err)
	}
	fmt.Printf("READY %d\n", c.Rank())
	if c.Rank() == c.Size()-1 {
		io.Copy(io.Discard, os.Stdin) // stopped or killed meanwhile
		return
	}
	var line [1]byte
	os.Stdin.Read(line[:])
	opDone := make(chan error, 1)
	if mode == "busy" {
		go func() {
			w := make([]float32, 1<<16)
			opDone <- AllReduce(ctx, c, w, w, Sum)
		}()
		// Close once the allreduce holds the turn (it then waits on the
		// stopped rank), not before it started.
		for c.serving.Load() == c.tickets.Load() && len(opDone) == 0 {
			runtime.Gosched()
		}
	} else {
		opDone <- nil
	}
	d, _ := time.ParseDuration(os.Getenv("GORUN_CLOSE_TEST_CTX"))
	cctx, ccancel := context.WithTimeout(context.Background(), d)
	start := time.Now()
	err = c.CloseContext(cctx)
	took := time.Since(start)
	ccancel()
	fmt.Printf("CLOSE rank=%d took=%v err=%v\n", c.Rank(), took.Round(time.Millisecond), err)
	select {
	case err := <-opDone:
		fmt.Printf("OP rank=%d closed=%v err=%v\n", c.Rank(), errors.Is(err, ErrClosed) || errors.Is(err, ErrPeerClosed), err)
	case <-time.After(30 * time.Second):
		fmt.Printf("OP rank=%d still running after Close\n", c.Rank())
	}
	// A second Close returns what the first one did, at once.
	start = time.Now()
	err2 := c.Close()
	fmt.Printf("CLOSE2 rank=%d took=%v same=%v\n", c.Rank(), time.Since(start).Round(time.Millisecond), fmt.Sprint(err2) == fmt.Sprint(err) || err2 == nil)
}

// closeJob starts n ranks of TestCloseChild, waits for READY, applies sig
// to the last rank, lets the others close, and returns their output.
// A job that does not form (a false gossip death at start-up on a loaded
// machine: the bootstrap's limit, not what these tests check) is started
// again, up to three times.
func closeJob(t *testing.T, transport, mode string, sig syscall.Signal, closeCtx time.Duration) []string {
	t.Helper()
	for attempt := 1; ; attempt++ {
		res, formed := closeJobOnce(t, transport, mode, sig, closeCtx)
		if formed {
			return res
		}
		if attempt == 3 {
			t.Fatalf("the job did not form in %d attempts", attempt)
		}
		t.Logf("attempt %d: the job did not form (above); again", attempt)
	}
}

func closeJobOnce(t *testing.T, transport, mode string, sig syscall.Signal, closeCtx time.Duration) (_ []string, formed bool) {
	t.Helper()
	const n = 3
	seed := "127.0.0.1:" + strconv.Itoa(initFreePort(t))
	common := append(initCleanEnv(), closeChildEnv+"="+mode, "GORUN_SIZE="+strconv.Itoa(n), "GORUN_SEEDS="+seed,
		"GORUN_JOB_ID=close-test-"+initRandomID(), "GORUN_JOB_TOKEN="+initRandomID(), "GORUN_TIMEOUT=100s",
		"GORUN_TRANSPORT="+transport, "GORUN_CLOSE_TEST_CTX="+closeCtx.String())
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Second)
	defer cancel()
	cmds, stdins, outs := startStdinRanks(t, ctx, n, common, "TestCloseChild")
	last := cmds[n-1]
	defer func() {
		last.Process.Signal(syscall.SIGCONT)
		for _, cmd := range cmds {
			cmd.Process.Kill()
			cmd.Wait()
		}
	}()
	dump := func() {
		for r := range n {
			t.Logf("rank %d:\n%s", r, outs[r].String())
		}
	}
	for end := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		ready := true
		for r := range n {
			out := outs[r].String()
			if strings.Contains(out, "INIT ERROR") || strings.Contains(out, "WARMUP ERROR") {
				dump()
				return nil, false
			}
			ready = ready && strings.Contains(out, fmt.Sprintf("READY %d", r))
		}
		if ready {
			break
		}
		if time.Now().After(end) {
			dump()
			t.Fatal("timed out waiting for READY")
		}
	}
	if err := last.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	for r := range n - 1 {
		stdins[r].Write([]byte("\n"))
	}
	// The survivors exit on their own while the last rank stays stopped
	// (or dead): Close did not wait for it.
	for r := range n - 1 {
		if err := cmds[r].Wait(); err != nil {
			dump()
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	res := make([]string, n-1)
	for r := range res {
		res[r] = outs[r].String()
	}
	return res, true
}

// closeResult parses a rank's CLOSE line.
func closeResult(t *testing.T, out string) (took time.Duration, errText string) {
	t.Helper()
	i := strings.Index(out, "CLOSE rank=")
	if i < 0 {
		t.Fatalf("no CLOSE line:\n%s", out)
	}
	line, _, _ := strings.Cut(out[i:], "\n")
	f := strings.Fields(line)
	took, err := time.ParseDuration(strings.TrimPrefix(f[2], "took="))
	if err != nil {
		t.Fatalf("%q: %v", line, err)
	}
	return took, strings.TrimPrefix(strings.Join(f[3:], " "), "err=")
}

// TestCloseContextEnds: CloseContext returns when its context ends even if
// the release cannot finish (held here by a step that waits), with an error
// that says so; the release then finishes, and a later Close returns its
// result.
func TestCloseContextEnds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := NewLocal(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer cs[1].Close()
	hold, released := make(chan struct{}), make(chan struct{})
	cs[0].onClose = append(cs[0].onClose, func() { <-hold; close(released) })
	cctx, ccancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- cs[0].CloseContext(cctx) }()
	ccancel()
	err = <-errc
	var re *RankError
	if !errors.As(err, &re) || re.Rank != 0 || re.Op != "close" || !errors.Is(err, context.Canceled) {
		t.Fatalf("CloseContext whose context ended: %v", err)
	}
	if err := cs[0].Barrier(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("an operation after CloseContext returned: %v, want ErrClosed", err)
	}
	close(hold)
	if err := cs[0].Close(); err != nil { // waits for the same release
		t.Errorf("Close after the release: %v", err)
	}
	select {
	case <-released:
	default:
		t.Error("Close returned before the release it waits for ended")
	}
}

// TestCloseFrozenPeer: a survivor closes while an allreduce waits on a
// rank stopped with SIGSTOP (its sockets stay open: the transport sees
// nothing). The running allreduce fails with ErrClosed, and CloseContext
// returns by its context's end, not when gossip declares the rank dead or
// at the communicator's timeout (100 s): the frozen rank stays stopped
// until the survivors have exited.
func TestCloseFrozenPeer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 3 processes per transport")
	}
	for _, tr := range []string{"shm", "tcp"} {
		t.Run(tr, func(t *testing.T) {
			for r, out := range closeJob(t, tr, "busy", syscall.SIGSTOP, 200*time.Millisecond) {
				took, errText := closeResult(t, out)
				t.Logf("rank %d: CloseContext(200ms) took %v: %s", r, took, errText)
				if errText != "<nil>" && !strings.Contains(errText, context.DeadlineExceeded.Error()) {
					t.Errorf("rank %d: close: %s", r, errText)
				}
				if !strings.Contains(out, fmt.Sprintf("OP rank=%d closed=true", r)) {
					t.Errorf("rank %d: the allreduce running at Close:\n%s", r, out)
				}
				if !strings.Contains(out, "same=true") {
					t.Errorf("rank %d: a second Close:\n%s", r, out)
				}
				if took > 10*time.Second { // a hang, not a slow machine: the bound is 200 ms
					t.Errorf("rank %d: CloseContext with a 200 ms context took %v", r, took)
				}
			}
		})
	}
}

// TestCloseDeadPeer: a survivor closes after a peer was killed, with
// nothing running; Close needs nothing from the dead rank and succeeds.
func TestCloseDeadPeer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 3 processes per transport")
	}
	for _, tr := range []string{"shm", "tcp"} {
		t.Run(tr, func(t *testing.T) {
			for r, out := range closeJob(t, tr, "idle", syscall.SIGKILL, 100*time.Second) {
				took, errText := closeResult(t, out)
				t.Logf("rank %d: Close took %v: %s", r, took, errText)
				if errText != "<nil>" {
					t.Errorf("rank %d: close: %s", r, errText)
				}
				if took > 10*time.Second {
					t.Errorf("rank %d: Close with a dead peer took %v", r, took)
				}
			}
		})
	}
}
