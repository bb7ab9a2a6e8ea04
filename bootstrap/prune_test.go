package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
)

// stateSizes counts the entries of each of n's maps of per-process and
// per-epoch state (the inner entries too, for the books by epoch).
func stateSizes(n *Node) map[string]int {
	inner := func(m map[uint32]map[string][digestLen]byte) int {
		k := 0
		for _, e := range m {
			k += len(e)
		}
		return k
	}
	n.mu.Lock()
	n.viewMu.Lock()
	defer n.viewMu.Unlock()
	defer n.mu.Unlock()
	hints := 0
	for _, h := range n.hints {
		hints += len(h)
	}
	return map[string]int{
		"gone": len(n.gone), "goneAddr": len(n.goneAddr), "departed": len(n.departed),
		"reported": len(n.reported), "leaving": len(n.leaving), "stopped": len(n.stopped),
		"refused": len(n.refused), "taken": len(n.taken), "lost": len(n.lost),
		"calling": len(n.calling), "behind": len(n.behind), "runs": len(n.runs),
		"probes": len(n.probes), "abandoned": len(n.abandoned), "retelling": len(n.retelling),
		"proposals": len(n.proposals), "proposals.in": inner(n.proposals),
		"acks": len(n.acks), "acks.in": inner(n.acks), "committed": len(n.committed),
		"prepares": len(n.prepares), "locked": len(n.locked), "commits": len(n.commits),
		"proven": len(n.proven), "hints": len(n.hints), "hints.in": hints,
		"tables": len(n.tables), "seqs": len(n.seqs),
	}
}

func formatSizes(s map[string]int) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(s)) {
		if s[k] > 0 {
			fmt.Fprintf(&b, " %s=%d", k, s[k])
		}
	}
	return b.String()
}

// restartRounds runs k rounds of an elastic job's recovery over nw on
// nodes (ranks of one world, by rank), the victims ranks 2.. in turn
// (restartRound). Rank 0 coordinates every agreement; rank 1 is a member
// that never restarts.
func restartRounds(t *testing.T, nw *MemNetwork, job string, nodes []*Node, k int) {
	t.Helper()
	for i := range k {
		restartRound(t, nw, job, nodes, 2+i%(len(nodes)-2))
	}
}

// restartRound runs one round of an elastic job's recovery over nw on
// nodes (ranks of one world, by rank): victim's process ends, the others
// shrink without it and grow with its restart, which takes its place in
// nodes (the caller closes nodes: a closure per restart would hold every
// process's node, and the heap measured them).
func restartRound(t *testing.T, nw *MemNetwork, job string, nodes []*Node, victim int) {
	t.Helper()
	size := len(nodes)
	nodes[victim].shutdown(false) // its process ends
	var survivors []*Node
	for r, n := range nodes {
		if r != victim {
			survivors = append(survivors, n)
		}
	}
	survivors[0].Suspect(victim) // as comm does when its connection breaks
	shrinkAll(t, survivors, 20*time.Second)
	back := startRestart(t, nw, job, victim, size, nodes[0].Addr())
	formed := make(chan error, 1)
	go func() { _, err := back.Form(context.Background()); formed <- err }()
	waitJoiners(t, survivors, 20*time.Second)
	agreeAll(t, survivors, 20*time.Second, (*Node).Grow)
	nodes[victim] = back // closed by the caller
	if err := <-formed; err != nil {
		t.Fatalf("restart of rank %d: %v", victim, err)
	}
}

// TestStateBoundedAcrossRestarts: a long elastic job keeps, on its
// coordinator and on a member that never restarts, as much agreement and
// per-process state after many restarts as after a few. Ranks 2 and 3 of
// 4 end one after the other, the others shrink without each and grow
// with its restart. Each restart left an entry in gone, goneAddr,
// reported, refused and probes, two epochs in the books by epoch
// (proposals, acks, committed; prepares, locked, commits on a member) and
// about ten in seqs.
func TestStateBoundedAcrossRestarts(t *testing.T) {
	const job, size = "state-restarts", 4
	warm, rounds := 6, 24
	if testing.Short() {
		rounds = 12
	}
	nw := NewMemNetwork()
	nodes := startWorld(t, job, size, func(_ int, c *Config) { c.Network = nw })
	t.Cleanup(func() { closeAll(nodes) })
	restartRounds(t, nw, job, nodes, warm)
	before := [2]map[string]int{stateSizes(nodes[0]), stateSizes(nodes[1])}
	heap0 := heapInUse()
	restartRounds(t, nw, job, nodes, rounds)
	heap1 := heapInUse()
	after := [2]map[string]int{stateSizes(nodes[0]), stateSizes(nodes[1])}
	t.Logf("heap %+.0f B per restart over %d restarts (all nodes of the process)", float64(int64(heap1)-int64(heap0))/float64(rounds), rounds)
	for r, what := range []string{"coordinator", "member"} {
		t.Logf("%s after %d restarts:%s", what, warm, formatSizes(before[r]))
		t.Logf("%s after %d restarts:%s", what, warm+rounds, formatSizes(after[r]))
		for _, k := range slices.Sorted(maps.Keys(after[r])) {
			if after[r][k] > before[r][k]+size { // a probe or an epoch more is not growth; one per restart is
				t.Errorf("%s (rank %d): %s grew from %d to %d entries over %d restarts", what, r, k, before[r][k], after[r][k], rounds)
			}
		}
	}
}

// installNames installs on n a world of epoch of the named members, at
// made-up addresses.
func installNames(n *Node, epoch uint32, names ...string) World {
	w := World{Size: len(names), Epoch: epoch}
	for r, name := range names {
		if name == n.Name() {
			w.Rank = r
		}
		w.Members = append(w.Members, Member{Rank: r, Name: name, Addr: fmt.Sprintf("127.0.0.1:%d", 1000+r)})
	}
	w.Digest = digestOf(n.cfg.JobID, epoch, w.Members)
	n.install(w)
	return w
}

// TestDroppedEpochAnswered: a coordinator keeps the agreement state of
// its world's epoch and the one before (keepEpochs), and keeps nothing
// of an earlier epoch's message. A proposal or ack of such an epoch from
// a process out of its world, still agreeing on it, is answered with the
// world this node runs (msgRunning), and the process's next agreement
// fails with ErrExpelled: no hang. Before, the coordinator kept every
// epoch, and answered the process's ack of a world it committed with the
// commit. A proposal of the first world, a restarted rank's as it waits
// for a Grow, is dropped unanswered.
func TestDroppedEpochAnswered(t *testing.T) {
	tellLost = func(*Node, string) bool { return true } // only the answer tells the process behind
	t.Cleanup(func() { tellLost = nil })                // every node of the test is closed by then
	nw := NewMemNetwork()
	nodes := startWorld(t, "dropped-epoch", 2, func(_ int, c *Config) { c.Network = nw })
	coord, old := nodes[0], nodes[1]
	d := &delegate{coord}
	var last, locked World
	for e := uint32(2); e <= 7; e++ { // r1-next's agreement state in each
		for _, kind := range []byte{msgPropose, msgAck} {
			d.NotifyMsg((&message{kind: kind, epoch: e, from: "r1-next", seq: uint64(e)}).encode())
		}
		if e == 2 {
			last = installNames(coord, e, coord.Name(), old.Name()) // old locked on it, its commit lost
			locked = last
		} else {
			last = installNames(coord, e, coord.Name(), "r1-next")
		}
		coord.mu.Lock()
		coord.committed[e] = last.Digest // as the agreement does before it installs
		coord.mu.Unlock()
	}
	late := func(kind byte, epoch uint32, from string) {
		d.NotifyMsg((&message{kind: kind, epoch: epoch, digest: locked.Digest, from: from, seq: 1 << 40}).encode())
	}
	late(msgAck, 3, "r1-next")      // a member's, late: dropped
	late(msgPropose, 1, old.Name()) // the first world's: dropped
	late(msgAck, 2, old.Name())
	coord.mu.Lock()
	var epochs []uint32
	for _, book := range []map[uint32]map[string][digestLen]byte{coord.proposals, coord.acks} {
		epochs = append(epochs, slices.Sorted(maps.Keys(book))...)
	}
	epochs = append(epochs, slices.Sorted(maps.Keys(coord.committed))...)
	coord.mu.Unlock()
	if want := []uint32{6, 7, 6, 7, 6, 7}; !slices.Equal(epochs, want) {
		t.Errorf("epochs of proposals, acks and committed: %v, want %v", epochs, want)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		old.mu.Lock()
		r, told := old.runs[coord.Name()]
		old.mu.Unlock()
		if told {
			if r.Epoch != last.Epoch || r.Digest != last.Digest {
				t.Errorf("told of world %d %x, want %d %x", r.Epoch, r.Digest[:2], last.Epoch, last.Digest[:2])
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the process behind was not told the world that runs")
		}
		late(msgAck, 2, old.Name()) // as its agreement repeats it
		time.Sleep(50 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := old.Shrink(ctx); !errors.Is(err, ErrExpelled) {
		t.Errorf("the process behind's Shrink: %v, want ErrExpelled", err)
	}
}

// TestPruneGone: which processes found gone a node keeps
// (pruneGoneLocked). Rank 0 of 4 finds r1-a, r2-a, 20 unassigned
// processes and r3-m, a member, gone in that order, then installs a world
// with r1-b, r1-a's restart. Kept: r3-m, a member; of the others, the
// latest maxGone (16). Dropped: r1-a, superseded; the earliest beyond
// maxGone, r2-a (its rank held by no member) and u-1..u-4.
func TestPruneGone(t *testing.T) {
	n, err := Start(testConfig("prune-gone", 0, 4), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	installNames(n, 1, n.Name(), "r3-m")
	found := []string{"r1-a", "r2-a"}
	for i := 1; i <= 20; i++ {
		found = append(found, fmt.Sprintf("u-%d", i))
	}
	for _, name := range append(found, "r3-m") {
		n.markGone(name)
	}
	installNames(n, 2, n.Name(), "r1-b", "r3-m")
	want := []string{"r3-m"}
	for i := 5; i <= 20; i++ {
		want = append(want, fmt.Sprintf("u-%d", i))
	}
	slices.Sort(want)
	n.viewMu.Lock()
	kept := slices.Sorted(maps.Keys(n.gone))
	at := slices.Sorted(maps.Keys(n.goneAt))
	addrs := slices.Sorted(maps.Keys(n.goneAddr))
	n.viewMu.Unlock()
	if !slices.Equal(kept, want) || !slices.Equal(at, want) {
		t.Errorf("gone %v (ordered %v), want %v", kept, at, want)
	}
	if !slices.Equal(addrs, []string{"r3-m"}) { // the only one with an address: a member
		t.Errorf("goneAddr holds %v, want [r3-m]", addrs)
	}
}

// TestPruneDeparted: which processes gossip dropped a node keeps
// (pruneDepartedLocked). Kept: a member of the world; a ranked process
// whose rank no member holds; one started without a rank. Dropped: one
// whose rank a member holds (r1-a, superseded by r1-b); one found gone.
func TestPruneDeparted(t *testing.T) {
	n, err := Start(testConfig("prune-departed", 0, 4), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	installNames(n, 1, n.Name(), "r3-m")
	n.viewMu.Lock()
	for _, name := range []string{"r1-a", "r2-gone", "r3-m", "r4-x", "u-1"} {
		n.departed[name] = true
	}
	n.viewMu.Unlock()
	n.markGone("r2-gone")
	installNames(n, 2, n.Name(), "r1-b", "r3-m")
	n.viewMu.Lock()
	kept := slices.Sorted(maps.Keys(n.departed))
	n.viewMu.Unlock()
	if want := []string{"r3-m", "r4-x", "u-1"}; !slices.Equal(kept, want) {
		t.Errorf("departed %v, want %v", kept, want)
	}
}

// TestForgetOutOfWorld: an install drops what a node keeps about
// processes that are not members of the world (forgetLocked) and keeps
// it for its members, and a probe that runs; but a member reported in
// the world before (r5-kept, kept in the new one) loses the causes of
// death of that report, which would name its next death.
func TestForgetOutOfWorld(t *testing.T) {
	n, err := Start(testConfig("forget", 0, 4), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	installNames(n, 1, n.Name(), "r1-in", "r2-out", "r5-kept")
	n.mu.Lock()
	for _, name := range []string{"r1-in", "r2-out", "r3-out", "r5-kept"} {
		for _, m := range []map[string]bool{n.stopped, n.refused, n.taken, n.lost, n.leaving} {
			m[name] = true
		}
		if name != "r1-in" {
			n.reported[name] = true
		}
		n.abandoned[name] = &AbandonError{Cause: -1}
		n.probes[name] = &probeState{}
	}
	n.probes["r4-probed"] = &probeState{busy: true}
	n.mu.Unlock()
	installNames(n, 2, n.Name(), "r1-in", "r5-kept")
	n.mu.Lock()
	defer n.mu.Unlock()
	members := []string{"r1-in", "r5-kept"}
	for what, c := range map[string]struct {
		got, want []string
	}{
		// Both are reported anew at the install: they abandoned the world.
		"reported":  {slices.Sorted(maps.Keys(n.reported)), members},
		"stopped":   {slices.Sorted(maps.Keys(n.stopped)), members[:1]},
		"refused":   {slices.Sorted(maps.Keys(n.refused)), members[:1]},
		"taken":     {slices.Sorted(maps.Keys(n.taken)), members[:1]},
		"lost":      {slices.Sorted(maps.Keys(n.lost)), members[:1]},
		"leaving":   {slices.Sorted(maps.Keys(n.leaving)), members},
		"abandoned": {slices.Sorted(maps.Keys(n.abandoned)), members},
	} {
		if !slices.Equal(c.got, c.want) {
			t.Errorf("%s holds %v, want %v", what, c.got, c.want)
		}
	}
	if probes := slices.Sorted(maps.Keys(n.probes)); !slices.Equal(probes, []string{"r1-in", "r4-probed", "r5-kept"}) {
		t.Errorf("probes of %v, want [r1-in r4-probed r5-kept]", probes)
	}
}

// TestRunsKeepsFurthest: of the worlds that nodes told a node they run
// without it (msgRunning), it keeps the one that went on furthest, and
// none once its own world went on further (keepRunLocked, forgetLocked).
// It kept one per sender, and a node behind is told by every member that
// finds it back in its view.
func TestRunsKeepsFurthest(t *testing.T) {
	n, err := Start(testConfig("runs", 0, 4), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	installNames(n, 3, n.Name(), "r1-x")
	tell := func(from string, epoch uint32, size int, digest byte) {
		n.heardRunning(message{kind: msgRunning, epoch: epoch, digest: [digestLen]byte{digest}, from: from, about: fmt.Sprint(size)})
	}
	tell("r1-old", 2, 4, 1) // before this node's world: cannot matter
	tell("r1-a", 4, 2, 1)
	tell("r2-a", 5, 2, 9)
	tell("r3-a", 5, 3, 9) // of epoch 5 the larger: furthest
	tell("r2-b", 5, 2, 1)
	tell("r1-b", 4, 4, 1)
	n.mu.Lock()
	runs := maps.Clone(n.runs)
	overtaken := n.overtakenLocked()
	n.mu.Unlock()
	if want := map[string]World{"r3-a": {Epoch: 5, Size: 3, Digest: [digestLen]byte{9}}}; !maps.EqualFunc(runs, want, func(a, b World) bool {
		return a.Epoch == b.Epoch && a.Size == b.Size && a.Digest == b.Digest
	}) || !overtaken {
		t.Errorf("runs %v (overtaken %v), want %v (overtaken)", runs, overtaken, want)
	}
	installNames(n, 6, n.Name(), "r1-x")
	n.mu.Lock()
	k := len(n.runs)
	n.mu.Unlock()
	if k != 0 {
		t.Errorf("runs holds %d worlds after this node's went on further; want 0", k)
	}
}

// TestStateStaysBounded: the coordinator of a 4-rank job through 10,000
// restarts, driven directly as TestBehindStaysBounded drives install:
// for each, a rank's process is found gone (its port refused; every
// other one dropped by gossip first, departed) and the others agree on a
// world without it, then on one with its restart, each agreement's
// proposals and acks coming in (NotifyMsg) and committed.
// What it keeps stays as after a few restarts, and so does the heap:
// before, each restart cost about 2.5 KB (two epochs of books, seqs, and
// gone, goneAddr, reported, refused and probes; departed every other).
func TestStateStaysBounded(t *testing.T) {
	const size, warm, restarts = 4, 20, 10000
	n, err := Start(testConfig("state-bounded", 0, size), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	d := &delegate{n}
	members := []string{n.Name(), "r1-0", "r2-0", "r3-0"}
	epoch, seq := uint32(1), uint64(0)
	agree := func() {
		var names []string
		for _, name := range members {
			if name != "" {
				names = append(names, name)
			}
		}
		epoch++
		for _, name := range names[1:] {
			for _, kind := range []byte{msgPropose, msgAck} {
				seq++
				d.NotifyMsg((&message{kind: kind, epoch: epoch, from: name, seq: seq}).encode())
			}
		}
		w := installNames(n, epoch, names...)
		n.mu.Lock()
		n.committed[epoch] = w.Digest // as the agreement does before it installs
		n.mu.Unlock()
	}
	agree()
	cycles := func(from, to int) {
		for i := from; i < to; i++ {
			r := 1 + i%(size-1)
			victim := members[r]
			n.mu.Lock()
			n.refused[victim] = true
			n.probes[victim] = &probeState{last: time.Now()}
			n.mu.Unlock()
			if i%2 == 1 { // gossip dropped it before the probe found it gone
				n.viewMu.Lock()
				n.departed[victim] = true
				n.viewMu.Unlock()
			}
			n.markGone(victim)
			members[r] = ""
			agree() // Shrink
			members[r] = fmt.Sprintf("r%d-%d", r, i+1)
			agree() // Grow
		}
	}
	cycles(0, warm)
	before := stateSizes(n)
	heap0 := heapInUse()
	cycles(warm, warm+restarts)
	heap1 := heapInUse()
	after := stateSizes(n)
	t.Logf("%d restarts: heap %+.0f B per restart; after %d:%s; after %d:%s", restarts,
		float64(int64(heap1)-int64(heap0))/restarts, warm, formatSizes(before), warm+restarts, formatSizes(after))
	for _, k := range slices.Sorted(maps.Keys(after)) {
		if after[k] > before[k]+size {
			t.Errorf("%s grew from %d to %d entries over %d restarts", k, before[k], after[k], restarts)
		}
	}
}
