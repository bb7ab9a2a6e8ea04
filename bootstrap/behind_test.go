package bootstrap

import (
	"fmt"
	"runtime"
	"slices"
	"testing"
)

// restartCycles installs, on n (rank 0 of a job of size), k rounds of an
// elastic job's recovery from one process's end: a world without it (the
// survivors' Shrink), then a world with a new process in its place (the
// Grow that admits its restart), named by name(round, rank). The ranks
// 1..size-1 take turns. The processes are not in n's view (none runs):
// as for a rank whose process ended, and for one gossip dropped.
func restartCycles(n *Node, size, k int, name func(i, r int) string) {
	members := make([]string, size)
	members[0] = n.Name()
	for r := 1; r < size; r++ {
		members[r] = name(-1, r)
	}
	epoch := n.World().Epoch
	install := func(names []string) {
		epoch++
		w := World{Size: len(names), Epoch: epoch}
		for r, name := range names {
			w.Members = append(w.Members, Member{Rank: r, Name: name, Addr: fmt.Sprintf("127.0.0.1:%d", 1000+r)})
		}
		n.install(w)
	}
	install(members)
	for i := range k {
		r := 1 + i%(size-1)
		var without []string
		for s, name := range members {
			if s != r {
				without = append(without, name)
			}
		}
		install(without)
		members[r] = name(i, r)
		install(members)
	}
}

func heapInUse() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestBehindStaysBounded: a long elastic job whose ranks restart again and
// again keeps a few of the processes it went on without (behind), not one
// per restart. Each entry held its world's inWorld map: about 3 MB after
// 10,000 restarts of a 4-rank job, and growing. Ranks started with their
// rank (gorun --max-restarts): the restart in the world supersedes the old
// process; started unassigned (Config.Rank -1), nothing does, and the
// oldest go beyond maxBehind.
func TestBehindStaysBounded(t *testing.T) {
	const size, restarts = 4, 10000
	for _, c := range []struct {
		name  string
		named func(i, r int) string
		most  int
	}{
		{"ranked", func(i, r int) string { return fmt.Sprintf("r%d-%012x", r, i+1) }, 0},         // each superseded by its restart
		{"unassigned", func(i, r int) string { return fmt.Sprintf("u-%d-%012x", r, i+1) }, size}, // maxBehind
	} {
		t.Run(c.name, func(t *testing.T) {
			n, err := Start(testConfig("behind-"+c.name, 0, size), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer n.Close()
			restartCycles(n, size, 10, c.named) // the maps and the world's first allocations
			before := heapInUse()
			restartCycles(n, size, restarts, c.named)
			after := heapInUse()
			n.mu.Lock()
			k := len(n.behind)
			n.mu.Unlock()
			t.Logf("%d restarts: %d processes behind, heap %+d KiB", restarts, k, (int64(after)-int64(before))/1024)
			if k > c.most {
				t.Errorf("after %d restarts of a %d-rank job, %d processes behind; want at most %d", restarts, size, k, c.most)
			}
		})
	}
}

// TestBehindBoundedAcrossRestarts: the same over the in-memory network,
// with real nodes: ranks 1, 2 and 3 of 4 end one after the other, six
// times, the others shrink and grow with each one's restart. After each
// Grow no member keeps any of the processes that ended (each was found
// gone, and a restart holds its rank); before, rank 0 kept every one.
func TestBehindBoundedAcrossRestarts(t *testing.T) {
	const job, size, rounds = "behind-restarts", 4, 6
	nw := NewMemNetwork()
	nodes := startWorld(t, job, size, func(_ int, c *Config) { c.Network = nw })
	t.Cleanup(func() { closeAll(nodes) })
	for i := range rounds {
		restartRound(t, nw, job, nodes, 1+i%(size-1))
		for r, n := range nodes {
			n.mu.Lock()
			k := len(n.behind)
			n.mu.Unlock()
			if k != 0 {
				t.Errorf("round %d: rank %d keeps %d processes behind after %d restarts; want 0", i, r, k, i+1)
			}
		}
	}
}

// TestPruneBehind: which processes behind a node keeps (pruneBehindLocked).
// Rank 0 of 4 held a world of r1..r3 and six unassigned processes, then,
// one world at a time, left them out (r3-old last). Kept: a node in the view, even with
// a restart of its rank in the world (a live process: the entry keeps it
// out of the tables until its meta says Behind); a ranked node out of the
// view whose rank no member holds; of the nodes out of the view, the
// latest maxBehind. Dropped: a node found gone; one out of the view whose
// rank a restart in the world holds; the earliest out of the view beyond
// maxBehind.
func TestPruneBehind(t *testing.T) {
	n, err := Start(testConfig("prune-behind", 0, 4), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	all := []string{n.Name(), "r1-live", "r2-gone", "u-1", "u-2", "u-3", "u-4", "u-5", "u-6", "r3-old"}
	epoch := uint32(1)
	install := func(names ...string) {
		w := World{Size: len(names), Epoch: epoch}
		for r, name := range names {
			w.Members = append(w.Members, Member{Rank: r, Name: name, Addr: fmt.Sprintf("127.0.0.1:%d", 1000+r)})
		}
		n.install(w)
		epoch++
	}
	install(all...)
	n.viewMu.Lock()
	n.peers["r1-live"] = peer{name: "r1-live", meta: meta{Rank: 1, Size: 4, JobID: n.cfg.JobID}}
	n.gone["r2-gone"] = true
	n.viewMu.Unlock()
	for i := range all[1:] { // leave them out one by one, r1-live first
		install(append([]string{n.Name()}, all[i+2:]...)...)
	}
	install(n.Name(), "r1-restart", "r2-restart") // their restarts; rank 3's is not back
	var kept []string
	n.mu.Lock()
	for name := range n.behind {
		kept = append(kept, name)
	}
	n.mu.Unlock()
	slices.Sort(kept)
	// maxBehind is 4 out of the view: the 3 latest unassigned and r3-old.
	if want := []string{"r1-live", "r3-old", "u-4", "u-5", "u-6"}; !slices.Equal(kept, want) {
		t.Errorf("behind %v, want %v", kept, want)
	}
}

// TestStartedRank: startedRank reads the rank nodeName put in a name.
func TestStartedRank(t *testing.T) {
	for _, r := range []int{0, 7, 1023} {
		if got := startedRank(nodeName(r)); got != r {
			t.Errorf("startedRank(nodeName(%d)) = %d", r, got)
		}
	}
	for _, name := range []string{nodeName(-1), "r2", "r-1", "r-12", "rx-12", "", "2-ab"} {
		if got := startedRank(name); got != -1 {
			t.Errorf("startedRank(%q) = %d, want -1", name, got)
		}
	}
}
