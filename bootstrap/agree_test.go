package bootstrap

// Agreements whose tables gain a member between the members' proposals and
// the coordinator's prepare (agree.go, proposed).

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// holdPrepare makes coord, once it has locked on a world of epoch 2, run
// change and then wait until seen holds at each of nodes (and 50 ms more,
// for their agreement loops to derive their tables) before it sends the
// prepare (beforePrepare), once. It returns how many times coord came to
// prepare epoch 2.
func holdPrepare(t *testing.T, coord *Node, nodes []*Node, change func(), what string, seen func(*Node) bool) *atomic.Int32 {
	var held atomic.Int32
	beforePrepare = func(n *Node, w *World) {
		if n != coord || w.Epoch != 2 || held.Add(1) != 1 {
			return
		}
		change()
		deadline := time.Now().Add(20 * time.Second)
		for _, m := range nodes {
			for !seen(m) {
				if time.Now().After(deadline) {
					t.Errorf("%s never saw %s", m.Name(), what)
					return
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Cleanup(func() { beforePrepare = nil }) // every agreement has ended by then
	return &held
}

// growAll runs Grow on every node concurrently, as shrinkAll runs Shrink.
func growAll(t *testing.T, nodes []*Node, within time.Duration) []World {
	t.Helper()
	return agreeAll(t, nodes, within, (*Node).Grow)
}

// Two ranks launched at once to grow a job of 4 (gorun --max-np 6): the
// members propose a world with the first joiner, and the second reaches
// them after they proposed and before the coordinator's prepare of that
// world does (beforePrepare holds the prepare until it has). Before, they
// derived the table with both joiners, refused the prepare, and the
// coordinator, locked on it, waited for their acks until every rank timed
// out (CI, 2026-11-29, reliability's TestGrowBeyondStartSize). Now they
// lock on the world they proposed; a second Grow admits the other joiner.
func TestGrowJoinerDuringPrepare(t *testing.T) {
	const job = "grow-race"
	mod := func(_ int, c *Config) { c.MaxSize = 6 }
	nodes := startWorld(t, job, 4, mod)
	join := func(rank int) (*Node, chan error) {
		cfg := testConfig(job, rank, 4)
		mod(rank, &cfg)
		cfg.Seeds = []string{nodes[3].Addr()}
		n, err := Start(cfg, fmt.Appendf(nil, "blob %d", rank))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		formed := make(chan error, 1)
		go func() { _, err := n.Form(context.Background()); formed <- err }()
		return n, formed
	}
	var (
		second  *Node
		formed2 chan error
	)
	held := holdPrepare(t, nodes[0], nodes[1:], func() { second, formed2 = join(5) },
		"the second joiner", func(m *Node) bool { return m.Joiners() == 2 })
	first, formed1 := join(4)
	waitJoiners(t, nodes, 20*time.Second)

	grow := func(members []*Node, want int) []World {
		t.Helper()
		worlds := growAll(t, members, 20*time.Second)
		for i, w := range worlds {
			if w.Size != want || w.Rank != i || w.Digest != worlds[0].Digest {
				t.Fatalf("member %d: rank %d of %d (epoch %d), want rank %d of %d", i, w.Rank, w.Size, w.Epoch, i, want)
			}
		}
		return worlds
	}
	grow(nodes, 5)
	if held.Load() == 0 {
		t.Fatal("the coordinator never prepared epoch 2")
	}
	if err := <-formed1; err != nil {
		t.Fatalf("first joiner: %v", err)
	}
	if w := first.World(); w.Size != 5 || w.Rank != 4 {
		t.Fatalf("first joiner: rank %d of %d, want rank 4 of 5", w.Rank, w.Size)
	}
	nodes = append(nodes, first)
	waitJoiners(t, nodes, 20*time.Second)
	grow(nodes, 6)
	if err := <-formed2; err != nil {
		t.Fatalf("second joiner: %v", err)
	}
	if w := second.World(); w.Size != 6 || w.Rank != 5 {
		t.Fatalf("second joiner: rank %d of %d, want rank 5 of 6", w.Rank, w.Size)
	}
}

// A member that gossip took for dead comes back into the survivors' views
// after they proposed the world without it and before the coordinator's
// prepare reaches them (beforePrepare holds it until it has; the flap is
// played through the event delegate, as memberlist would report it).
// Before, their tables (with it again) no longer hashed to the prepared
// digest and the Shrink stalled until every survivor's context ended, as
// the Grow above did. Now they lock on the world they proposed and the
// Shrink commits without the member; it is left to find itself expelled.
func TestShrinkMemberBackDuringPrepare(t *testing.T) {
	const victim = 3
	nodes := startWorld(t, "shrink-back", 4, nil)
	survivors := nodes[:victim]
	var back *memberlist.Node
	for _, m := range nodes[1].ml.Members() {
		if m.Name == nodes[victim].Name() {
			back = m
		}
	}
	if back == nil {
		t.Fatal("rank 3 is not in rank 1's memberlist")
	}
	held := holdPrepare(t, nodes[0], survivors[1:], func() {
		for _, m := range survivors[1:] {
			(&delegate{m}).NotifyJoin(back) // back in the view: its table has it again
		}
	}, "rank 3 back", func(m *Node) bool { return !m.left()[back.Name] })
	for _, m := range survivors {
		(&delegate{m}).NotifyLeave(back) // gossip declares rank 3 dead (it is not)
	}
	for i, w := range shrinkAll(t, survivors, 20*time.Second) {
		if w.Size != 3 || w.Rank != i || w.Epoch != 2 {
			t.Fatalf("survivor %d: rank %d of %d (epoch %d), want rank %d of 3 in epoch 2", i, w.Rank, w.Size, w.Epoch, i)
		}
	}
	if held.Load() == 0 {
		t.Fatal("the coordinator never prepared epoch 2")
	}
}

// proposals keeps the last keepProposals tables by their members' names
// and rebuilds one from the records a member holds now: only if they hold
// every one of its members, unchanged, and the prepare comes from its
// coordinator.
func TestProposalsFind(t *testing.T) {
	const job = "props"
	rec := func(names ...string) []Member {
		ms := make([]Member, len(names))
		for i, n := range names {
			ms[i] = Member{Rank: i, Name: n, Addr: n + ":1", Host: "h", Blob: []byte(n)}
		}
		return ms
	}
	prep := func(ms []Member) message {
		return message{kind: msgPrepare, epoch: 2, digest: digestOf(job, 2, ms), from: ms[0].Name}
	}
	var ps proposals
	old := rec("a", "b", "c")
	ps.add(digestOf(job, 2, old), old)
	now := rec("a", "b", "x", "c") // x joined since
	w, ok := ps.find(job, "c", prep(old), now)
	if !ok || w.Rank != 2 || w.Size != 3 || w.Digest != digestOf(job, 2, old) || w.Members[2].Addr != "c:1" {
		t.Fatalf("find = %+v, %v; want c as rank 2 of the proposed a, b, c", w, ok)
	}
	if _, ok := ps.find(job, "c", prep(old), rec("a", "c")); ok {
		t.Error("found a table whose member b has left since")
	}
	changed := rec("a", "b", "c")
	changed[1].Blob = []byte("b again")
	if _, ok := ps.find(job, "c", prep(old), changed); ok {
		t.Error("found a table whose member b's record changed")
	}
	other := prep(old)
	other.from = "b"
	if _, ok := ps.find(job, "c", other, now); ok {
		t.Error("took a prepare from a node that is not the table's coordinator")
	}
	for i := range keepProposals {
		ms := rec("a", fmt.Sprint("n", i))
		ps.add(digestOf(job, 2, ms), ms)
	}
	if _, ok := ps.find(job, "c", prep(old), now); ok || len(ps.digests) != keepProposals {
		t.Errorf("%d proposals kept, the oldest found: want the last %d", len(ps.digests), keepProposals)
	}
}

// A member cut off after it proposed a Shrink's world and before the
// coordinator's prepare reaches it (a broken link or a host frozen: its
// port neither refuses nor answers, so no probe finds it gone). Before,
// the coordinator, locked on the world, waited for its ack, and the other
// members for the commit, until their contexts ended. Now the coordinator
// gives it up once gossip dropped it and the last call found no answer
// (lost.go); every survivor agrees on the old world without it in the next
// epoch and is told of it on Failures.
func TestShrinkMemberCutDuringPrepare(t *testing.T) {
	const victim = 3
	nw := NewMemNetwork()
	nodes := startWorld(t, "shrink-cut", 4, func(_ int, c *Config) { c.Network = nw })
	survivors := nodes[:victim]
	held := holdPrepare(t, nodes[0], nil, func() { nw.Cut(nodes[victim].Addr(), true) },
		"", func(*Node) bool { return true })
	// The victim proposes as the others do, then its link breaks; its own
	// Shrink (which goes on alone) ends with the test's.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	vdone := make(chan struct{})
	var vw World
	var verr error
	go func() { defer close(vdone); vw, verr = nodes[victim].Shrink(ctx) }()
	defer func() {
		cancel()
		<-vdone
		t.Logf("the cut member's own Shrink: %d ranks (epoch %d), %v", vw.Size, vw.Epoch, verr)
	}()

	start := time.Now()
	worlds := shrinkAll(t, survivors, 20*time.Second)
	took := time.Since(start)
	if held.Load() == 0 {
		t.Fatal("the coordinator never prepared epoch 2 (the victim never proposed?)")
	}
	for i, w := range worlds {
		if w.Size != 3 || w.Rank != i || w.Digest != worlds[0].Digest || w.Epoch < 3 {
			t.Fatalf("survivor %d: rank %d of %d (epoch %d), want rank %d of 3 in epoch 3 or later (2 was abandoned)", i, w.Rank, w.Size, w.Epoch, i)
		}
	}
	for i, n := range survivors {
		select {
		case f := <-n.Failures():
			if f.Rank != victim || !errors.Is(f.Err, ErrPeerDead) {
				t.Errorf("survivor %d: failure %+v, want rank %d dead", i, f, victim)
			}
		default:
			t.Errorf("survivor %d: no failure reported for rank %d", i, victim)
		}
	}
	t.Logf("the survivors agreed without the cut member in %v", took.Round(time.Millisecond))
}

// The coordinator of a Shrink is cut off once every member acked, just
// before its commit, which is lost: it holds the new world, and the
// members stay locked on it with no commit. Before, they waited until
// their contexts ended. Now each gives up on the coordinator once gossip
// dropped it and the last call found no answer (lost.go), and they agree
// on the old world without it in the next epoch, as they would have
// shrunk the committed world once they found the coordinator gone.
func TestShrinkCoordinatorCutBeforeCommit(t *testing.T) {
	nw := NewMemNetwork()
	nodes := startWorld(t, "shrink-cut-coord", 4, func(_ int, c *Config) { c.Network = nw })
	var cut atomic.Int32
	beforeCommit = func(n *Node, w *World) {
		if n == nodes[0] && w.Epoch == 2 && cut.Add(1) == 1 {
			nw.Cut(n.Addr(), true)
		}
	}
	t.Cleanup(func() { beforeCommit = nil })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cdone := make(chan World, 1)
	go func() { w, _ := nodes[0].Shrink(ctx); cdone <- w }()

	start := time.Now()
	survivors := nodes[1:]
	worlds := shrinkAll(t, survivors, 20*time.Second)
	took := time.Since(start)
	if cut.Load() == 0 {
		t.Fatal("the coordinator never came to commit epoch 2")
	}
	if w := <-cdone; w.Epoch != 2 || w.Size != 4 {
		t.Errorf("the cut coordinator: epoch %d of %d ranks, want the committed epoch 2 of 4", w.Epoch, w.Size)
	}
	for i, w := range worlds {
		if w.Size != 3 || w.Rank != i || w.Digest != worlds[0].Digest || w.Epoch != 3 {
			t.Fatalf("survivor %d: rank %d of %d (epoch %d), want rank %d of 3 in epoch 3", i, w.Rank, w.Size, w.Epoch, i)
		}
	}
	for i, n := range survivors {
		select {
		case f := <-n.Failures():
			if f.Rank != 0 || !errors.Is(f.Err, ErrPeerDead) {
				t.Errorf("survivor %d: failure %+v, want rank 0 dead", i, f)
			}
		default:
			t.Errorf("survivor %d: no failure reported for rank 0", i)
		}
	}
	t.Logf("the members agreed without the cut coordinator in %v", took.Round(time.Millisecond))
}

// A rank joining a running job (gorun --max-np) is cut off after it
// proposed the Grow's world and before the coordinator's prepare reaches
// it. It is not in the current world, so no last call reports it: the
// coordinator gives it up once it has been out of the view for lostAfter
// (lost.go), and the members agree again, in the next epoch, on the world
// without it. Before, they waited for it until their contexts ended.
func TestGrowJoinerCutDuringPrepare(t *testing.T) {
	const job = "grow-cut"
	nw := NewMemNetwork()
	mod := func(_ int, c *Config) { c.MaxSize = 5; c.Network = nw }
	nodes := startWorld(t, job, 4, mod)
	cfg := testConfig(job, 4, 4)
	mod(4, &cfg)
	cfg.Seeds = []string{nodes[3].Addr()}
	joiner, err := Start(cfg, []byte("blob 4"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { joiner.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	jdone := make(chan struct{})
	go func() { defer close(jdone); joiner.Form(ctx) }()
	defer func() { cancel(); <-jdone }()
	waitJoiners(t, nodes, 20*time.Second)
	held := holdPrepare(t, nodes[0], nil, func() { nw.Cut(joiner.Addr(), true) }, "", func(*Node) bool { return true })

	start := time.Now()
	worlds := growAll(t, nodes, 20*time.Second)
	if held.Load() == 0 {
		t.Fatal("the coordinator never prepared epoch 2 (the joiner never proposed?)")
	}
	for i, w := range worlds {
		if w.Size != 4 || w.Rank != i || w.Digest != worlds[0].Digest || w.Epoch != 3 {
			t.Fatalf("member %d: rank %d of %d (epoch %d), want rank %d of 4 in epoch 3", i, w.Rank, w.Size, w.Epoch, i)
		}
	}
	t.Logf("the members agreed without the cut joiner in %v", time.Since(start).Round(time.Millisecond))
}

// A rank cut off from all the others agrees on a world of itself, as they
// agree on one without it: no quorum (RELIABILITY gap 15). Once the link is
// back, it sees their ranks as joiners of its world, and an elastic
// application calls Grow. The others answer its ask with their world of
// the same epoch, larger: its Grow fails with ErrExpelled (expel.go), as a
// rank the job went on without. Before, the Grow waited for them until its
// deadline.
func TestCutRankAloneThenExpelled(t *testing.T) {
	const victim = 3
	nw := NewMemNetwork()
	nodes := startWorld(t, "cut-alone", 4, func(_ int, c *Config) { c.Network = nw })
	nw.Cut(nodes[victim].Addr(), true)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	alone := make(chan World, 1)
	go func() {
		w, err := nodes[victim].Shrink(ctx)
		if err != nil {
			t.Errorf("the cut rank's Shrink: %v", err)
		}
		alone <- w
	}()
	for i, w := range shrinkAll(t, nodes[:victim], 20*time.Second) {
		if w.Size != 3 || w.Rank != i || w.Epoch != 2 {
			t.Fatalf("survivor %d: rank %d of %d (epoch %d), want rank %d of 3 in epoch 2", i, w.Rank, w.Size, w.Epoch, i)
		}
	}
	if w := <-alone; w.Size != 1 || w.Epoch != 2 {
		t.Fatalf("the cut rank agreed on a world of %d in epoch %d, want 1 (itself) in 2", w.Size, w.Epoch)
	}
	nw.Cut(nodes[victim].Addr(), false)
	deadline := time.Now().Add(15 * time.Second)
	for nodes[victim].Joiners() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the healed rank never saw the others again")
		}
		time.Sleep(20 * time.Millisecond)
	}
	start := time.Now()
	_, err := nodes[victim].Grow(ctx)
	if !errors.Is(err, ErrExpelled) {
		t.Fatalf("the healed rank's Grow: %v, want ErrExpelled", err)
	}
	t.Logf("the healed rank's Grow failed in %v: %v", time.Since(start).Round(time.Millisecond), err)
	// The side that goes on counts no joiner: the cut rank, back in its
	// views, runs a world of the same epoch that does not go on (Joiners).
	waitInView(t, nodes[:victim], nodes[victim].Name(), 15*time.Second)
	for i, n := range nodes[:victim] {
		if k := n.Joiners(); k != 0 {
			t.Errorf("survivor %d: %d joiners with the cut rank back; want 0", i, k)
		}
	}
}
