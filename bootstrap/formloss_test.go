package bootstrap

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// formResult is one node's Form outcome and when it came.
type formResult struct {
	w   World
	err error
	at  time.Duration
}

// formSome starts the given ranks of a job of size on nw (rank 0, the
// seed, must be among them) and runs Form on each with a context of
// within (their Timeout is a minute, gorun's). It returns the nodes by
// rank (nil for those not started) and a channel per rank that gets the
// outcome. The nodes are closed at the end of the test.
func formSome(t *testing.T, nw *MemNetwork, job string, size int, ranks []int, within time.Duration, mod func(r int, c *Config)) ([]*Node, []chan formResult) {
	t.Helper()
	nodes := make([]*Node, size)
	out := make([]chan formResult, size)
	ctx, cancel := context.WithTimeout(context.Background(), within)
	t.Cleanup(cancel)
	start := time.Now()
	for _, r := range ranks {
		c := testConfig(job, r, size)
		c.Network, c.Timeout = nw, time.Minute
		if r != 0 {
			c.Seeds = []string{nodes[0].Addr()}
		}
		if mod != nil {
			mod(r, &c)
		}
		n, err := Start(c, nil)
		if err != nil {
			t.Fatalf("start rank %d: %v", r, err)
		}
		t.Cleanup(func() { n.Close() })
		nodes[r], out[r] = n, make(chan formResult, 1)
		go func() {
			w, err := n.Form(ctx)
			out[r] <- formResult{w, err, time.Since(start)}
		}()
	}
	return nodes, out
}

// formLosingCommit forms the first world of a 2-rank job on a new
// MemNetwork (formSome) and, when rank 0 comes to commit it, cuts rank 1
// off, so that the commit is lost, then calls then(coordinator, member,
// world) there, once. It returns the Form outcomes by rank, and whether
// the coordinator came to commit (ask once a Form ended).
func formLosingCommit(t *testing.T, job string, within time.Duration, then func(coord, member *Node, w *World, out []chan formResult)) (nodes []*Node, out []chan formResult, committed func() bool) {
	t.Helper()
	nw := NewMemNetwork()
	ready := make(chan struct{})
	var injected atomic.Bool
	beforeCommit = func(n *Node, w *World) {
		<-ready
		if n != nodes[0] || w.Epoch != 1 || injected.Swap(true) {
			return
		}
		member := nodes[1]
		nw.Cut(member.Addr(), true) // the commit is lost
		then(n, member, w, out)
	}
	t.Cleanup(func() { beforeCommit = nil })
	nodes, out = formSome(t, nw, job, 2, []int{0, 1}, within, nil)
	close(ready)
	return nodes, out, injected.Load
}

// expectFormLoss waits for the Form of each rank in ranks and checks that
// it failed well before its deadline, naming rank dead as want.
func expectFormLoss(t *testing.T, out []chan formResult, ranks []int, dead int, want error) {
	t.Helper()
	for _, r := range ranks {
		res := <-out[r]
		var oe *OpError
		switch {
		case res.err == nil:
			t.Errorf("rank %d formed a world of %d without rank %d", r, res.w.Size, dead)
		case !errors.Is(res.err, ErrNotFormed) || !errors.Is(res.err, want) || !errors.As(res.err, &oe) || oe.Peer != dead:
			t.Errorf("rank %d after %v: %v; want a *FormError naming rank %d: %v", r, res.at.Round(time.Millisecond), res.err, dead, want)
		case res.at > 20*time.Second:
			t.Errorf("rank %d failed after %v, at its deadline", r, res.at)
		case !strings.Contains(res.err.Error(), fmt.Sprintf("rank %d died", dead)):
			t.Errorf("rank %d: %q does not say rank %d died", r, res.err, dead)
		default:
			t.Logf("rank %d after %v: %v", r, res.at.Round(time.Millisecond), res.err)
		}
	}
}

// A rank that gossip has seen dies before the first world is agreed:
// before, the others ignored its death until they formed and waited for
// their deadline (gorun's minute), then failed with a view that did not
// say why ("saw ranks [0-1 3], missing ranks [2]"). Now memberlist's dead
// verdict, its last call unanswered, ends their Form naming it. Killed
// (its address refuses) and cut off (nothing answers: a dead host).
func TestFormEndsWhenRankDies(t *testing.T) {
	for _, how := range []string{"killed", "cut"} {
		t.Run(how, func(t *testing.T) {
			nw := NewMemNetwork()
			nodes, out := formSome(t, nw, "form-dies-"+how, 4, []int{0, 1, 2}, 25*time.Second, nil)
			waitInView(t, nodes[:2], nodes[2].Name(), 15*time.Second)
			if how == "killed" {
				nodes[2].shutdown(false) // no leave: a crash
			} else {
				nw.Cut(nodes[2].Addr(), true)
			}
			expectFormLoss(t, out, []int{0, 1}, 2, ErrPeerDead)
		})
	}
}

// The coordinator prepared the first world (every member proposed it) and
// rank 2 dies before it acks: the coordinator finds its port refused
// (evidence.go, now also while the first world forms) and fails at once;
// the members learn it from the coordinator (msgDead to its view) and fail
// naming rank 2 too, or, locked on the coordinator's world, naming the
// coordinator, which left unformed.
func TestFormEndsWhenAwaitedRankDies(t *testing.T) {
	nw := NewMemNetwork()
	var victim atomic.Pointer[Node]
	var held atomic.Int32
	beforePrepare = func(n *Node, w *World) {
		if w.Epoch == 1 && held.Add(1) == 1 {
			victim.Load().shutdown(false)
		}
	}
	t.Cleanup(func() { beforePrepare = nil })
	var nodes []*Node
	var out []chan formResult
	nodes, out = formSome(t, nw, "form-awaited", 4, []int{0, 1, 2}, 25*time.Second, nil)
	victim.Store(nodes[2])
	waitInView(t, nodes[:3], nodes[2].Name(), 15*time.Second)
	c := testConfig("form-awaited", 3, 4)
	c.Network, c.Timeout, c.Seeds = nw, time.Minute, []string{nodes[0].Addr()}
	n3, err := Start(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n3.Close() })
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()
	out[3] = make(chan formResult, 1)
	go func() {
		w, err := n3.Form(ctx)
		out[3] <- formResult{w, err, time.Since(start)}
	}()
	expectFormLoss(t, out, []int{0}, 2, ErrPeerDead)
	if held.Load() == 0 {
		t.Fatal("the coordinator never prepared the first world")
	}
	nodes[0].Close() // as comm.Init does when Form fails: it leaves, unformed
	for _, r := range []int{1, 3} {
		res := <-out[r]
		var oe *OpError
		ok := errors.As(res.err, &oe) && (oe.Peer == 2 && errors.Is(res.err, ErrPeerDead) || oe.Peer == 0 && errors.Is(res.err, ErrPeerLeft))
		if !ok || !errors.Is(res.err, ErrNotFormed) || res.at > 20*time.Second {
			t.Errorf("rank %d after %v: %v; want a *FormError naming rank 2 dead or rank 0 left", r, res.at, res.err)
		} else {
			t.Logf("rank %d after %v: %v", r, res.at.Round(time.Millisecond), res.err)
		}
	}
}

// A rank whose process Config.Running shows running on this host is not
// lost when gossip drops it while the world forms (a starved rank at a
// loaded start): the others keep forming, and once it is back (its
// refutation) and the last rank comes, the world forms with it.
//
// Every node runs in this process, so Running says so of each, as it does
// on one host: rank 2, cut off too, must not lose ranks 0 and 1 either. (It
// said so of rank 2 alone until 2026-11-30, when a CI run under load
// failed: rank 3's Join waited a minute for a commit that the coordinator
// never sent. The likely cause, not reproduced in 26 runs here: rank 2's
// own verdict on ranks 0 and 1, later than theirs on it since nobody
// confirms its suspicion, came while the test, starved, still held the
// cut; its last calls went unanswered and its Form failed, as it must for
// ranks not running on its host, and the coordinator waited for its ack.)
func TestFormKeepsRunningRank(t *testing.T) {
	nw := NewMemNetwork()
	running := func(Member) bool { return true }
	nodes, out := formSome(t, nw, "form-running", 4, []int{0, 1, 2}, time.Minute, // rank 2 comes back by its refutation: slow under -race
		func(_ int, c *Config) { c.Running = running })
	waitInView(t, nodes[:2], nodes[2].Name(), 15*time.Second)
	nw.Cut(nodes[2].Addr(), true)
	deadline := time.Now().Add(15 * time.Second)
	for _, n := range nodes[:2] { // gossip's verdict
		for {
			n.viewMu.Lock()
			_, in := n.peers[nodes[2].Name()]
			n.viewMu.Unlock()
			if !in {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: gossip did not drop rank 2 within 15 s", n.Name())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	time.Sleep(500 * time.Millisecond) // a last call would have ended by now
	for _, r := range []int{0, 1} {
		select {
		case res := <-out[r]:
			t.Fatalf("rank %d's Form ended while rank 2 runs: %v", r, res.err)
		default:
		}
	}
	nw.Cut(nodes[2].Addr(), false)
	c := testConfig("form-running", 3, 4)
	c.Network, c.Seeds, c.Running, c.Timeout = nw, []string{nodes[0].Addr()}, running, time.Minute
	n3, err := Join(context.Background(), c, nil)
	if err != nil {
		t.Fatalf("rank 3: %v", err)
	}
	defer n3.Close()
	for _, r := range []int{0, 1, 2} {
		if res := <-out[r]; res.err != nil || res.w.Size != 4 || res.w.Digest != n3.World().Digest {
			t.Errorf("rank %d: %v (world of %d)", r, res.err, res.w.Size)
		}
	}
}

// A member locked on the first world whose commit is lost and whose
// coordinator then dies, after a formed node told it (in a push/pull) that
// the job runs: the coordinator's death ends its Form, naming rank 0, as
// it does for a member not told. The job that runs is the world it locked
// on, in which the coordinator is dead.
func TestFormEndsWhenCoordinatorDiesAfterCommit(t *testing.T) {
	_, out, committed := formLosingCommit(t, "form-coord-dies", 25*time.Second, func(n, member *Node, w *World, _ []chan formResult) {
		// A formed node's push/pull came.
		member.mergeState(append(binary.AppendUvarint([]byte{stateVersion}, 1), w.Digest[:]...))
		member.mu.Lock()
		member.refused[n.Name()] = true // then a probe found the coordinator's port refused
		member.mu.Unlock()
		member.markGone(n.Name())
	})
	if coord := <-out[0]; coord.err != nil {
		t.Fatalf("coordinator: %v", coord.err)
	}
	if !committed() {
		t.Fatal("the coordinator never came to commit")
	}
	expectFormLoss(t, out, []int{1}, 0, ErrPeerDead)
}
