package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A member the others shrank without while it was alive (a witness saw it
// stopped; it then resumed) calls Shrink from its old world: it must learn
// that the job went on without it (ErrExpelled), not wait for the others
// to leave and then agree on a world of itself. With push/pull slowed
// down, only the msgAsk answer can tell it; with push/pull at its default,
// either can.
func TestExpelledNodeLearnsIt(t *testing.T) {
	for _, c := range []struct {
		name string
		mod  func(int, *Config)
	}{
		{"ask", func(i int, c *Config) { slowGossip(i, c); c.PushPullInterval = time.Hour }},
		{"default", slowGossip},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, victim := range []int{0, 2} { // the old coordinator, and a member
				nodes := startWorld(t, "expel-"+c.name, 4, c.mod)
				nodes[(victim+1)%4].Witnessed(1, victim)
				var survivors []*Node
				for r, n := range nodes {
					if r != victim {
						survivors = append(survivors, n)
					}
				}
				for _, w := range shrinkAll(t, survivors, 10*time.Second) {
					if w.Size != 3 || w.Epoch != 2 {
						t.Fatalf("survivors' world %+v, want 3 ranks of epoch 2", w)
					}
				}
				ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
				w, err := nodes[victim].Shrink(ctx)
				cancel()
				if !errors.Is(err, ErrExpelled) {
					t.Fatalf("victim rank %d: Shrink returned world %+v, error %v; want ErrExpelled", victim, w, err)
				}
				t.Logf("victim rank %d: %v", victim, err)
				// The survivors go on: a second Shrink among them still agrees.
				for _, w := range shrinkAll(t, survivors, 10*time.Second) {
					if w.Size != 3 || w.Epoch != 3 {
						t.Fatalf("survivors' second world %+v, want 3 ranks of epoch 3", w)
					}
				}
				closeAll(nodes)
			}
		})
	}
}

// The same after the others finished and left while the victim was away:
// their leave notice reaches the members they had found gone, and the
// victim learns that the job ran past it instead of agreeing on a world of
// itself once nobody else is left.
func TestExpelledNodeLearnsItAfterTheJobLeft(t *testing.T) {
	nodes := startWorld(t, "expel-left", 3, slowGossip)
	nodes[0].Witnessed(1, 2)
	survivors := nodes[:2]
	shrinkAll(t, survivors, 10*time.Second)
	closeAll(survivors)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	w, err := nodes[2].Shrink(ctx)
	if !errors.Is(err, ErrExpelled) {
		t.Fatalf("victim: Shrink returned world %+v, error %v; want ErrExpelled", w, err)
	}
	t.Logf("victim: %v", err)
}

// Of the two sides of a partition (two worlds of one epoch), exactly one
// goes on: the larger, or of two of a size the one with the lower digest.
func TestGoesOn(t *testing.T) {
	lo, hi := [digestLen]byte{1}, [digestLen]byte{2}
	for _, c := range []struct {
		size  int
		d     [digestLen]byte
		other int
		od    [digestLen]byte
		want  bool
	}{
		{3, hi, 1, lo, true},  // the larger, whatever the digests
		{1, lo, 3, hi, false}, // the smaller
		{2, lo, 2, hi, true},  // a tie: the lower digest
		{2, hi, 2, lo, false},
	} {
		if got := goesOn(c.size, c.d, c.other, c.od); got != c.want {
			t.Errorf("goesOn(%d, %x, %d, %x) = %v, want %v", c.size, c.d[0], c.other, c.od[0], got, c.want)
		}
		if back := goesOn(c.other, c.od, c.size, c.d); back == c.want {
			t.Errorf("both or neither of (%d, %x) and (%d, %x) go on", c.size, c.d[0], c.other, c.od[0])
		}
	}
}

// Of the two members of one side of a partition, only the first hears
// from the other side, which goes on (the other side's tells reach the
// members of a side one by one). Its Grow fails with ErrExpelled and it
// closes, as its application exits; the second, whose Grow waits for the
// first, must fail with ErrExpelled too. Before relaySplit it derived a
// table of itself once the first left and agreed on a world of one, of
// the next epoch, which the job took for the one it went on in, and the
// other side was expelled in turn (TestPartitionHealExpelsLoneRank, 2|2,
// CI 2026-12-03). Two ways: the first's relay reaches the second; the
// relay is lost (tellLost) or comes after the leave, and its leave notice
// tells (leaveNotice).
func TestSplitReachesEveryMemberOfTheSide(t *testing.T) {
	for _, c := range []struct {
		name  string
		relay bool
	}{{"relay", true}, {"leave", false}} {
		t.Run(c.name, func(t *testing.T) {
			if !c.relay {
				tellLost = func(*Node, string) bool { return true }
				t.Cleanup(func() { tellLost = nil }) // every node of the test is closed by then
			}
			splitTold(t, "split-relay-"+c.name)
		})
	}
}

func splitTold(t *testing.T, job string) {
	nodes := startWorld(t, job, 2, nil)
	w := agreeAll(t, nodes, 20*time.Second, (*Node).Grow)[0] // epoch 2, the same two: expelledAt judges epochs past the first
	if w.Epoch != 2 || w.Size != 2 || w.Digest == [digestLen]byte{} {
		t.Fatalf("grew into %+v, want the two ranks in epoch 2", w)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	second := make(chan error, 1)
	go func() {
		got, err := nodes[1].Grow(ctx)
		if err == nil {
			err = fmt.Errorf("agreed on rank %d of %d in epoch %d", got.Rank, got.Size, got.Epoch)
		}
		second <- err
	}()
	time.Sleep(100 * time.Millisecond) // the second waits for the first's proposal
	// The other side: a world of the same epoch and size, of a lower
	// digest (zero): it goes on (goesOn).
	nodes[0].heardRunning(message{kind: msgRunning, epoch: w.Epoch, from: job + "-other-side", about: "2"})
	if _, err := nodes[0].Grow(ctx); !errors.Is(err, ErrExpelled) {
		t.Fatalf("the told member's Grow: %v, want ErrExpelled", err)
	}
	if err := nodes[0].Close(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := <-second; !errors.Is(err, ErrExpelled) {
		t.Fatalf("the other member's Grow: %v, want ErrExpelled", err)
	}
	t.Logf("the other member's Grow failed %v after the first closed", time.Since(start).Round(time.Millisecond))
}

// A member the others expelled (comm's membership check found it came from
// the side of a partition that does not go on) but whose own check failed,
// so that it calls Shrink with them: their Shrink leaves it out (Expel),
// and its own fails with ErrExpelled instead of agreeing on all of them
// again, which it did before Expel, it being alive and in every view.
func TestExpelledMemberShrinksWithTheOthers(t *testing.T) {
	nodes := startWorld(t, "expel-member", 3, slowGossip)
	defer closeAll(nodes)
	const victim = 2
	for _, n := range nodes[:victim] {
		n.Expel(victim)
		n.Expel(n.World().Rank) // itself: ignored
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		w, err := nodes[victim].Shrink(ctx)
		if err == nil {
			err = fmt.Errorf("agreed on %+v", w)
		}
		errc <- err
	}()
	for _, w := range shrinkAll(t, nodes[:victim], 10*time.Second) {
		if w.Size != 2 || w.Epoch != 2 {
			t.Fatalf("the others' world %+v, want 2 ranks of epoch 2", w)
		}
	}
	if err := <-errc; !errors.Is(err, ErrExpelled) {
		t.Fatalf("expelled rank %d: Shrink: %v; want ErrExpelled", victim, err)
	}
}

// A member the others shrank without while it lived (cut off, as a frozen
// or starved rank is: gossip declared it dead and nobody answered the last
// call) comes back and keeps gossiping, without calling anything. It is
// not a joiner of their world: it cannot be admitted (its state is stale,
// and its Shrink fails with ErrExpelled), so their Joiners stays 0 with it
// back in their views (it was 1: an elastic application called Grow for
// it). A restart of its rank, a new process, is one, and their Grow
// admits it, not the old process.
func TestJoinersLeaveOutRankLeftBehind(t *testing.T) {
	const job, victim = "joiners-behind", 2
	nw := NewMemNetwork()
	nodes := startWorld(t, job, 3, func(_ int, c *Config) { c.Network = nw })
	defer closeAll(nodes)
	nw.Cut(nodes[victim].Addr(), true)
	survivors := nodes[:victim]
	shrunk := shrinkAll(t, survivors, 20*time.Second)
	nw.Cut(nodes[victim].Addr(), false)
	waitInView(t, survivors, nodes[victim].Name(), 20*time.Second)
	for i, n := range survivors {
		if k := n.Joiners(); k != 0 {
			t.Errorf("survivor %d: %d joiners with rank %d, which the job went on without, back in its view; want 0", i, k, victim)
		}
	}
	if k := nodes[victim].Joiners(); k != 0 {
		t.Errorf("rank %d, left behind: %d joiners; want 0 (its world holds the others)", victim, k)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	w, err := nodes[victim].Shrink(ctx)
	cancel()
	if !errors.Is(err, ErrExpelled) {
		t.Fatalf("rank %d, left behind: Shrink returned world %+v, error %v; want ErrExpelled", victim, w, err)
	}

	// Its restart: a new process of the same rank, while the old one still
	// gossips, counts once.
	back := startRestart(t, nw, job, victim, 3, survivors[0].Addr())
	defer back.Close()
	waitJoiners(t, survivors, 20*time.Second)
	for i, n := range survivors {
		if k := n.Joiners(); k != 1 {
			t.Errorf("survivor %d: %d joiners with rank %d restarted; want 1", i, k, victim)
		}
	}
	// The Grow takes the restart, not the old process, for rank 2
	// (growTable), though the old one still gossips.
	formed := make(chan error, 1)
	go func() { _, err := back.Form(context.Background()); formed <- err }()
	for i, w := range agreeAll(t, survivors, 20*time.Second, (*Node).Grow) {
		if w.Size != 3 || w.Rank != i || w.Epoch != shrunk[i].Epoch+1 || w.Members[victim].Name != back.Name() {
			t.Errorf("survivor %d after Grow: rank %d of %d (epoch %d), rank %d %s; want rank %d of 3 (epoch %d), rank %d the restarted %s",
				i, w.Rank, w.Size, w.Epoch, victim, w.Members[min(victim, len(w.Members)-1)].Name, i, shrunk[i].Epoch+1, victim, back.Name())
		}
	}
	if err := <-formed; err != nil {
		t.Fatalf("restarted rank %d: %v", victim, err)
	}
}

// A rank admitted after the job went on without a process does not count
// that process as a joiner when it comes back into the view: it never held
// a world with it (behind), but the process, told by the members that the
// job went on without it, says so in its meta. Four ranks: rank 2 is cut
// off and the others shrink; rank 3 closes and ranks 0 and 1 shrink; rank
// 3's restart is admitted by their Grow; then rank 2's link heals. The
// restart counted rank 2's old process as a joiner (1, for good), where
// ranks 0 and 1 count none.
func TestJoinersOfRankAdmittedAfterOneLeftBehind(t *testing.T) {
	const job, victim = "joiners-admitted-after", 2
	nw := NewMemNetwork()
	nodes := startWorld(t, job, 4, func(_ int, c *Config) { c.Network = nw })
	defer closeAll(nodes)
	nw.Cut(nodes[victim].Addr(), true)
	shrinkAll(t, []*Node{nodes[0], nodes[1], nodes[3]}, 20*time.Second)
	nodes[3].Close()
	survivors := nodes[:victim]
	shrinkAll(t, survivors, 20*time.Second)

	back := startRestart(t, nw, job, 3, 4, survivors[0].Addr())
	defer back.Close()
	waitJoiners(t, survivors, 20*time.Second)
	formed := make(chan error, 1)
	go func() { _, err := back.Form(context.Background()); formed <- err }()
	for i, w := range agreeAll(t, survivors, 20*time.Second, (*Node).Grow) {
		if w.Size != 3 || w.Members[2].Name != back.Name() {
			t.Fatalf("survivor %d after Grow: %d ranks, rank 2 %s; want 3, rank 2 the restarted %s", i, w.Size, w.Members[min(2, w.Size-1)].Name, back.Name())
		}
	}
	if err := <-formed; err != nil {
		t.Fatalf("restarted rank 3: %v", err)
	}

	nw.Cut(nodes[victim].Addr(), false)
	grown := []*Node{survivors[0], survivors[1], back}
	waitInView(t, grown, nodes[victim].Name(), 20*time.Second)
	deadline := time.Now().Add(10 * time.Second) // the old process's meta update: a few gossip rounds
	for i, n := range grown {
		for n.Joiners() != 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if k := n.Joiners(); k != 0 {
			t.Errorf("rank %d of the grown world: %d joiners with rank %d's old process, which the job went on without, in its view; want 0", i, k, victim)
		}
	}
}

// A Grow leaves out a process the job went on without, though it lives and
// claims a rank no restart claims: the members' table (growTable) takes
// what Joiners counts. Four ranks: rank 2 is cut off and the others
// shrink; its link heals and it is told, so that it flags itself behind
// (meta.Behind); rank 3 closes, ranks 0 and 1 shrink and grow with rank
// 3's restart. Their table took rank 2's old process in as rank 2, and the
// Grow waited for its proposal, which never comes, until its context
// ended. The old process's own Shrink and Grow fail with ErrExpelled.
func TestGrowLeavesOutRankLeftBehind(t *testing.T) {
	const job, victim = "grow-behind", 2
	nw := NewMemNetwork()
	nodes := startWorld(t, job, 4, func(_ int, c *Config) { c.Network = nw })
	defer closeAll(nodes)
	old := nodes[victim]
	nw.Cut(old.Addr(), true)
	shrinkAll(t, []*Node{nodes[0], nodes[1], nodes[3]}, 20*time.Second)
	nw.Cut(old.Addr(), false)
	waitInView(t, []*Node{nodes[0], nodes[1], nodes[3]}, old.Name(), 20*time.Second)
	nodes[3].Close()
	survivors := nodes[:victim]
	shrinkAll(t, survivors, 20*time.Second)

	back := startRestart(t, nw, job, 3, 4, survivors[0].Addr())
	defer back.Close()
	waitJoiners(t, survivors, 20*time.Second)
	waitFlaggedBehind(t, []*Node{survivors[0], survivors[1], back}, old.Name(), 20*time.Second)
	formed := make(chan error, 1)
	go func() { _, err := back.Form(context.Background()); formed <- err }()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	worlds := make([]World, len(survivors))
	errs := make([]error, len(survivors))
	done := make(chan struct{})
	for i, n := range survivors {
		go func() { worlds[i], errs[i] = n.Grow(ctx); done <- struct{}{} }()
	}
	for range survivors {
		<-done
	}
	for i, err := range errs {
		if err != nil {
			t.Errorf("survivor %d: Grow with rank %d's old process back in the view: %v; want a world of ranks 0, 1 and rank 3's restart", i, victim, err)
		}
	}
	if t.Failed() {
		return
	}
	for i, w := range worlds {
		if w.Size != 3 || w.Rank != i || w.Digest != worlds[0].Digest || w.Members[2].Name != back.Name() {
			t.Errorf("survivor %d after Grow: rank %d of %d, members %v; want rank %d of 3, rank 2 the restarted %s", i, w.Rank, w.Size, memberNames(w), i, back.Name())
		}
		if slices.ContainsFunc(w.Members, func(m Member) bool { return m.Name == old.Name() }) {
			t.Errorf("survivor %d: Grow admitted rank %d's old process %s, which the job went on without", i, victim, old.Name())
		}
	}
	if err := <-formed; err != nil {
		t.Fatalf("restarted rank 3: %v", err)
	}

	for _, op := range []struct {
		name string
		call func(*Node, context.Context) (World, error)
	}{{"Shrink", (*Node).Shrink}, {"Grow", (*Node).Grow}} {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		w, err := op.call(old, ctx)
		cancel()
		if !errors.Is(err, ErrExpelled) {
			t.Errorf("rank %d's old process: %s returned world %+v, error %v; want ErrExpelled", victim, op.name, w, err)
		}
	}
}

// waitFlaggedBehind waits until each of nodes holds name in its view with
// meta.Behind set, for up to within in all.
func waitFlaggedBehind(t *testing.T, nodes []*Node, name string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for _, n := range nodes {
		for {
			n.viewMu.Lock()
			q, ok := n.peers[name]
			n.viewMu.Unlock()
			if ok && q.meta.Behind {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s did not see %s flagged behind within %v", n.Name(), name, within)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

func memberNames(w World) []string {
	names := make([]string, len(w.Members))
	for i, m := range w.Members {
		names[i] = m.Name
	}
	return names
}

// leftBehindUntold stages a process the job went on without whose world's
// lowest ranks were all admitted after it was left out (they never held a
// world with it). Five ranks of job: rank 4 is cut off and the others
// shrink; ranks 0, 1 and 2 close, rank 3 (keeper) shrinks alone and grows
// with their restarts, at rank 3 again; then rank 4's link heals. Rank 0
// comes back at its address, as gorun restarts a seed rank, and the old
// process, whose seed it is, joins it there (keepSeeds). It returns rank
// 4's old process, which only keeper knows is behind, and the members
// (the restarts of ranks 0, 1 and 2, then keeper), each with the old
// process back in its view.
func leftBehindUntold(t *testing.T, job string) (old *Node, members []*Node) {
	t.Helper()
	const size, victim = 5, 4
	nw := NewMemNetwork()
	nodes := startWorld(t, job, size, func(_ int, c *Config) { c.Network = nw })
	t.Cleanup(func() { closeAll(nodes) })
	old, keeper := nodes[victim], nodes[3]
	_, seedPort, _ := splitAddr(nodes[0].Addr())
	nw.Cut(old.Addr(), true)
	shrinkAll(t, nodes[:victim], 20*time.Second)
	closeAll(nodes[:3])
	shrinkAll(t, []*Node{keeper}, 20*time.Second)

	formed := make(chan error, 3)
	for r := range 3 {
		port := 0
		if r == 0 {
			port = int(seedPort)
		}
		back := startRestartAt(t, nw, job, r, size, port, keeper.Addr())
		t.Cleanup(func() { back.Close() })
		members = append(members, back)
	}
	waitJoinersN(t, []*Node{keeper}, 3, 20*time.Second)
	for _, back := range members {
		go func() { _, err := back.Form(context.Background()); formed <- err }()
	}
	members = append(members, keeper)
	if w := agreeAll(t, []*Node{keeper}, 20*time.Second, (*Node).Grow)[0]; w.Size != 4 || w.Rank != 3 {
		t.Fatalf("rank 3 after Grow with the restarts: rank %d of %d, want 3 of 4", w.Rank, w.Size)
	}
	for range 3 {
		if err := <-formed; err != nil {
			t.Fatalf("restarted rank: %v", err)
		}
	}
	nw.Cut(old.Addr(), false)
	waitInView(t, members, old.Name(), 20*time.Second)
	return old, members
}

// A process the job went on without, back in the view, is told so by the
// members that know it (those that held a world with it), however high
// their ranks: its meta then says so (meta.Behind), and the members
// admitted later stop counting it as a joiner without any Grow. Only the
// lowest ranks of the world told it (tellRunningLocked), and here they
// were all admitted after it was left out (leftBehindUntold): nobody did,
// the restarts counted it (1 each, until a Grow told it), and the Grow's
// tables differed until then. Their Grow then agrees on the four members,
// and the old process's Shrink fails with ErrExpelled.
func TestGrowLeavesOutRankLeftBehindThatNobodyTold(t *testing.T) {
	old, members := leftBehindUntold(t, "grow-behind-untold")
	waitFlaggedBehind(t, members, old.Name(), 10*time.Second) // its meta update: a few gossip rounds
	for i, n := range members {
		if k := n.Joiners(); k != 0 {
			t.Errorf("member %d: %d joiners with rank 4's old process, which the job went on without, in its view; want 0", i, k)
		}
	}
	worlds := agreeAll(t, members, 20*time.Second, (*Node).Grow)
	for i, w := range worlds {
		if w.Size != 4 || w.Rank != i || w.Digest != worlds[0].Digest {
			t.Errorf("member %d after Grow: rank %d of %d, members %v; want rank %d of 4, the same world", i, w.Rank, w.Size, memberNames(w), i)
		}
	}
	for i, n := range members {
		if k := n.Joiners(); k != 0 {
			t.Errorf("member %d after Grow: %d joiners with rank 4's old process in its view; want 0", i, k)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if w, err := old.Shrink(ctx); !errors.Is(err, ErrExpelled) {
		t.Errorf("rank 4's old process: Shrink returned world %+v, error %v; want ErrExpelled", w, err)
	}
}

// A process the job went on without, untold (leftBehindUntold), when the
// members' Grow's first tell to it is lost, and any before it (tellLost:
// a failed stream, the node unreachable for a moment). The Grow told it
// once (tellUnflagged): its meta never said Behind, the restarts' tables
// held it where keeper's left it out, and the Grow waited until its
// context ended (FormError at 20 s). Now a Grow tells it again while it
// waits (keepTelling), and agrees a round later.
func TestGrowTellsAgainWhenTheTellIsLost(t *testing.T) {
	var (
		growing atomic.Bool  // the members' Grow has begun
		tellsIn atomic.Int32 // tells since it began: the first is lost
	)
	tellLost = func(n *Node, to string) bool {
		return !growing.Load() || tellsIn.Add(1) == 1
	}
	t.Cleanup(func() { tellLost = nil }) // every node of the test is closed by then
	old, members := leftBehindUntold(t, "grow-behind-lost")
	for i, n := range members[:3] {
		if k := n.Joiners(); k != 1 {
			t.Fatalf("restart of rank %d: %d joiners with rank 4's old process untold in its view; want 1 (the tells are lost)", i, k)
		}
	}
	growing.Store(true)
	t0 := time.Now()
	worlds := agreeAll(t, members, 20*time.Second, (*Node).Grow)
	t.Logf("Grow agreed after %v, %d tells in it, the first lost", time.Since(t0).Round(time.Millisecond), tellsIn.Load())
	if tellsIn.Load() == 0 {
		t.Fatal("no tell was lost in the Grow: the test did not stage what it tests")
	}
	for i, w := range worlds {
		if w.Size != 4 || w.Rank != i || w.Digest != worlds[0].Digest {
			t.Errorf("member %d after Grow: rank %d of %d, members %v; want rank %d of 4, the same world", i, w.Rank, w.Size, memberNames(w), i)
		}
		if slices.ContainsFunc(w.Members, func(m Member) bool { return m.Name == old.Name() }) {
			t.Errorf("member %d: Grow admitted rank 4's old process %s, which the job went on without", i, old.Name())
		}
	}
}

// The tellers of a node left behind are the lowest ranks of the members
// that held its last world with it (tellsLocked), not of the world: a
// member admitted later cannot tell it.
func TestTellersKnowTheNodeBehind(t *testing.T) {
	held := map[string]int{"a": 0, "b": 1, "c": 2, "me": 3} // its last world with this node
	for _, tc := range []struct {
		world []string // this node's world, by rank
		tells bool
	}{
		{[]string{"x", "y", "z", "me"}, true}, // the only one that knows, though rank 3
		{[]string{"a", "b", "c", "me"}, false},
		{[]string{"x", "a", "y", "b", "me"}, true},
		{[]string{"a", "x", "b", "c", "me"}, false},
		{[]string{"me", "a", "b", "c"}, true},
	} {
		n := &Node{name: "me"}
		for r, name := range tc.world {
			n.world.Members = append(n.world.Members, Member{Rank: r, Name: name})
		}
		if got := n.tellsLocked(held); got != tc.tells {
			t.Errorf("world %v: tells %v, want %v", tc.world, got, tc.tells)
		}
	}
}

// A process the job went on without comes back into the members' view and
// their tell (tellRunningLocked) is lost, each teller's first (tellLost: a
// failed stream, the node busy). No Grow runs to tell it again
// (keepTelling), and it calls nothing that would ask. The tellers tell it
// again until it says it knows (meta.Behind); before, it was told once,
// never flagged itself, and a rank admitted later counted it as a joiner.
// Once it says so, they stop. And a node that never takes the tell is told
// until it leaves the view, then no more.
func TestBackInViewTellsAgainWhenTheTellIsLost(t *testing.T) {
	for _, c := range []struct {
		name string
		lost func(first bool) bool // whether a tell is lost, the first of its teller or not
	}{
		{"first-lost", func(first bool) bool { return first }},
		{"all-lost", func(bool) bool { return true }},
	} {
		t.Run(c.name, func(t *testing.T) {
			const victim = 2
			var (
				told sync.Map     // teller → it told once
				lost atomic.Int32 // tells lost
			)
			tellLost = func(n *Node, to string) bool {
				_, again := told.LoadOrStore(n.Name(), true)
				if c.lost(!again) {
					lost.Add(1)
					return true
				}
				return false
			}
			t.Cleanup(func() { tellLost = nil }) // every node of the test is closed by then
			nw := NewMemNetwork()
			nodes := startWorld(t, "back-lost-"+c.name, 3, func(_ int, c *Config) { c.Network = nw })
			old := nodes[victim]
			nw.Cut(old.Addr(), true)
			survivors := nodes[:victim]
			shrinkAll(t, survivors, 20*time.Second)
			nw.Cut(old.Addr(), false)
			waitInView(t, survivors, old.Name(), 20*time.Second)
			if c.name == "first-lost" {
				deadline := time.Now().Add(10 * time.Second)
				for !flaggedBehind(old) && time.Now().Before(deadline) {
					time.Sleep(5 * time.Millisecond)
				}
				if !flaggedBehind(old) {
					t.Fatalf("rank %d, left behind and back in the view: not told that the job went on without it within 10 s (%d tells lost)", victim, lost.Load())
				}
				if lost.Load() == 0 {
					t.Fatal("no tell was lost: the test did not stage what it tests")
				}
				waitFlaggedBehind(t, survivors, old.Name(), 10*time.Second)
			} else {
				time.Sleep(time.Second) // tells, all lost
				if lost.Load() < 2*int32(len(survivors)) {
					t.Fatalf("%d tells lost in 1 s after rank %d came back; want each teller's tells repeated", lost.Load(), victim)
				}
				old.Close() // it leaves the view
			}
			deadline := time.Now().Add(10 * time.Second) // the tellers' next round: at most tellEveryMax
			for _, n := range survivors {
				for retelling(n) > 0 && time.Now().Before(deadline) {
					time.Sleep(10 * time.Millisecond)
				}
				if k := retelling(n); k > 0 {
					t.Errorf("%s still tells %d nodes again 10 s after rank %d flagged itself or left", n.Name(), k, victim)
				}
			}
		})
	}
}

// flaggedBehind says whether n's own meta says that the job went on
// without it (markBehind).
func flaggedBehind(n *Node) bool {
	n.metaMu.Lock()
	defer n.metaMu.Unlock()
	return n.meta.Behind
}

// retelling is how many nodes behind n tells again (retellLocked).
func retelling(n *Node) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.retelling)
}
