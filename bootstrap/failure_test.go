package bootstrap

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// expectFailure waits for rank's failure report on every node of nodes
// except rank itself, in the first world (epoch 1).
func expectFailure(t *testing.T, nodes []*Node, rank int, want error, within time.Duration) {
	t.Helper()
	expectFailureIn(t, nodes, rank, 1, want, within)
}

// expectFailureIn is expectFailure for the world of epoch.
func expectFailureIn(t *testing.T, nodes []*Node, rank int, epoch uint32, want error, within time.Duration) {
	t.Helper()
	deadline := time.After(within)
	for r, n := range nodes {
		if r == rank || n == nil {
			continue
		}
		select {
		case f := <-n.Failures():
			if f.Rank != rank || !errors.Is(f.Err, want) || f.Epoch != epoch {
				t.Errorf("rank %d got failure %+v (%v), want rank %d in epoch %d: %v", r, f, f.Err, rank, epoch, want)
			}
			var oe *OpError
			if !errors.As(f.Err, &oe) || oe.Peer != rank || oe.Rank != r {
				t.Errorf("rank %d: failure error %v does not name the ranks", r, f.Err)
			}
		case <-deadline:
			t.Fatalf("rank %d: no failure report for rank %d within %v", r, rank, within)
		}
	}
}

func TestKilledRankReported(t *testing.T) {
	nodes := startWorld(t, "kill", 4, nil)
	start := time.Now()
	nodes[2].shutdown(false) // a crash: no leave message
	expectFailure(t, nodes, 2, ErrPeerDead, 10*time.Second)
	t.Logf("killed rank reported to all in %v", time.Since(start))
}

func TestClosedRankReported(t *testing.T) {
	nodes := startWorld(t, "leave", 3, nil)
	start := time.Now()
	if err := nodes[1].Close(); err != nil {
		t.Fatal(err)
	}
	expectFailure(t, nodes, 1, ErrPeerLeft, 5*time.Second)
	t.Logf("closed rank reported to all in %v", time.Since(start))
	if _, ok := <-nodes[1].Failures(); ok {
		t.Error("Failures not closed after Close")
	}
}

func TestWorldNotFormed(t *testing.T) {
	seed, err := Start(testConfig("short", 0, 4), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer seed.Close()
	c := testConfig("short", 2, 4)
	c.Seeds = []string{seed.Addr()}
	other, err := Start(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	_, err = seed.Form(ctx)
	if time.Since(start) > 3*time.Second {
		t.Errorf("Form returned after %v", time.Since(start))
	}
	var fe *FormError
	if !errors.As(err, &fe) || !errors.Is(err, ErrNotFormed) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want *FormError", err)
	}
	if !slices.Equal(fe.Seen, []int{0, 2}) || !slices.Equal(fe.Missing, []int{1, 3}) {
		t.Errorf("seen %v missing %v, want [0 2] and [1 3]", fe.Seen, fe.Missing)
	}
	if msg := err.Error(); !strings.Contains(msg, "missing ranks [1 3]") {
		t.Errorf("message %q does not list the missing ranks", msg)
	}
}

func TestNoSeed(t *testing.T) {
	c := testConfig("noseed", 1, 2)
	c.Seeds = []string{"127.0.0.1:1"} // nothing listens there
	c.Timeout = 500 * time.Millisecond
	_, err := Join(context.Background(), c, nil)
	if !errors.Is(err, ErrNotFormed) || !strings.Contains(err.Error(), "joining the seeds failed") {
		t.Errorf("err = %v", err)
	}
}

func TestBadConfig(t *testing.T) {
	for _, c := range []Config{
		{Size: 2},                                 // no job id
		{JobID: "j", Size: 0},                     // no size
		{JobID: "j", Size: 2, Rank: 2},            // rank out of range
		{JobID: strings.Repeat("j", 65), Size: 1}, // job id too long
	} {
		if _, err := Join(context.Background(), c, nil); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%+v: err = %v, want ErrInvalidConfig", c, err)
		}
	}
	_, err := Join(context.Background(), testConfig("j", 0, 1), make([]byte, MaxBlob+1))
	if !errors.Is(err, ErrMetaTooLarge) {
		t.Errorf("oversize blob: err = %v, want ErrMetaTooLarge", err)
	}
}

func TestShrink(t *testing.T) {
	nodes := startWorld(t, "shrink", 4, nil)
	nodes[1].shutdown(false)
	expectFailure(t, nodes, 1, ErrPeerDead, 10*time.Second)
	survivors := []*Node{nodes[0], nodes[2], nodes[3]}
	worlds := make([]World, 3)
	errs := make([]error, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan int)
	for i, n := range survivors {
		go func() { worlds[i], errs[i] = n.Shrink(ctx); done <- i }()
	}
	for range survivors {
		<-done
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for i, w := range worlds {
		if w.Epoch != 2 || w.Size != 3 || w.Rank != i || w.Digest != worlds[0].Digest ||
			w.Members[i].Name != survivors[i].Name() {
			t.Errorf("survivor %d: world %+v", i, w)
		}
	}
	// The new world reports failures with the new ranks.
	survivors[2].shutdown(false)
	select {
	case f := <-survivors[0].Failures():
		if f.Rank != 2 || f.Epoch != 2 {
			t.Errorf("failure %+v, want rank 2 of epoch 2", f)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no failure report in the shrunk world")
	}
}

func TestNoGoroutineLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	nodes := startWorld(t, "leak", 3, nil)
	closeAll(nodes)
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<16)
		t.Errorf("%d goroutines before, %d after Close:\n%s", before, n, buf[:runtime.Stack(buf, true)])
	}
}

// waitProbesIdle waits until no evidence probe (evidence.go) runs on any
// of nodes.
func waitProbesIdle(t *testing.T, nodes []*Node) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for _, n := range nodes {
		for {
			busy := false
			n.mu.Lock()
			for _, st := range n.probes {
				busy = busy || st.busy
			}
			n.mu.Unlock()
			if !busy {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: an evidence probe still runs after 10 s", n.Name())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// TestRunningMemberNotDeclaredDead: a member whose process the kernel
// shows running on this host (Config.Running) is not reported when gossip
// declares it dead (a starved process misses its probes), and is reported
// once the evidence says it is gone.
func TestRunningMemberNotDeclaredDead(t *testing.T) {
	var running atomic.Bool
	running.Store(true)
	var victim atomic.Value // the name of rank 2
	victim.Store("")
	nodes := startWorld(t, "running", 4, func(i int, c *Config) {
		c.Running = func(m Member) bool { return running.Load() && m.Name == victim.Load().(string) }
	})
	victim.Store(nodes[2].Name())
	// The agreement that formed the world probed the members it waited
	// for (probeWaitingFor), and such a probe may run after Form returns:
	// one that finds rank 2's port closed is evidence, and reports it.
	// Under load that happened (a CI run of 6ad412e); it is not what this
	// test is about, so those probes end first.
	waitProbesIdle(t, nodes)
	nodes[2].shutdown(false) // silent: gossip declares it dead after its suspicion timeout
	// Wait until gossip on every other node has declared it dead (as
	// TestKilledRankReported's does within seconds); no node may have
	// reported it, since Running says its process runs.
	deadline := time.Now().Add(15 * time.Second)
	for _, r := range []int{0, 1, 3} {
		for slices.ContainsFunc(nodes[r].ml.Members(), func(m *memberlist.Node) bool { return m.Name == nodes[2].Name() }) {
			if time.Now().After(deadline) {
				t.Fatalf("rank %d: gossip did not declare rank 2 dead within 15 s", r)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	for _, r := range []int{0, 1, 3} {
		select {
		case f := <-nodes[r].Failures():
			t.Fatalf("rank %d reported %+v (%v) while its process runs", r, f, f.Err)
		default:
		}
	}
	running.Store(false)
	nodes[0].Suspect(2) // its connection broke: the refused gossip port is evidence
	expectFailure(t, nodes, 2, ErrPeerDead, 10*time.Second)
}

// TestUnseenMemberNotReportedAtInstall: a world may be committed on a node
// whose gossip view has not seen every member yet (it takes the
// coordinator's table); such a member is not dead. One that gossip
// dropped from the view before the world formed is, once its last call
// goes unanswered (lastcall.go).
func TestUnseenMemberNotReportedAtInstall(t *testing.T) {
	n, w := nodeR2Departed(t, "unseen") // r1 not seen yet
	n.install(w)
	select {
	case f := <-n.Failures():
		if f.Rank != 2 || !errors.Is(f.Err, ErrPeerDead) {
			t.Fatalf("failure %+v (%v), want rank 2 dead", f, f.Err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the member gossip dropped before formation is not reported")
	}
	select {
	case f := <-n.Failures():
		t.Fatalf("the member not seen yet reported: %+v (%v)", f, f.Err)
	default:
	}
}

// nodeOfThree starts a node with cfg and installs a world of epoch of
// it (rank 0) and two members that run nowhere, r1 and r2; the node is
// closed when the test ends.
func nodeOfThree(t *testing.T, cfg Config, epoch uint32) (*Node, World) {
	t.Helper()
	n, err := Start(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	w := World{Rank: 0, Size: 3, Epoch: epoch, Members: []Member{
		{Rank: 0, Name: n.Name(), Addr: n.Addr()},
		{Rank: 1, Name: "r1", Addr: "127.0.0.1:1"},
		{Rank: 2, Name: "r2", Addr: "127.0.0.1:2"},
	}}
	n.install(w)
	return n, w
}

// TestShrinkKeepsRunningMember: a member that gossip dropped but whose
// process the kernel shows running on this host stays in the next
// world's table (it is not reported either, and keeps itself in its own
// table); one that gossip dropped and that does not run leaves it.
func TestShrinkKeepsRunningMember(t *testing.T) {
	cfg := testConfig("keeps", 0, 3)
	cfg.Running = func(m Member) bool { return m.Name == "r1" }
	n, w := nodeOfThree(t, cfg, 1)
	n.viewMu.Lock()
	n.departed["r1"], n.departed["r2"] = true, true // both dropped by gossip
	n.viewMu.Unlock()
	p := shrinkTable(nil, w, n.left())
	var names []string
	for _, m := range p.members {
		names = append(names, m.Name)
	}
	if want := []string{n.Name(), "r1"}; !slices.Equal(names, want) {
		t.Fatalf("next world %v, want %v", names, want)
	}
}

// TestGrowWaitsForMemberOutOfView: a Grow derives no table while a member
// of the current world is out of the view and not known gone (gossip
// dropped it a moment ago: growOut); once its last call goes unanswered
// (reported), or evidence finds it gone, the table leaves it out. Before,
// a member out of the view was left out at once, and members that saw
// each other dead for a moment grew into disjoint worlds.
func TestGrowWaitsForMemberOutOfView(t *testing.T) {
	cfg := testConfig("growwaits", 0, 3)
	n, _ := nodeOfThree(t, cfg, 2)
	me := peer{name: n.Name(), addr: n.Addr(), meta: meta{Rank: 0, Size: 3, JobID: cfg.JobID}}
	r2 := peer{name: "r2", addr: "127.0.0.1:2", meta: meta{Rank: 2, Size: 3, JobID: cfg.JobID}}
	peers := map[string]peer{me.name: me, r2.name: r2} // r1 dropped by gossip
	n.viewMu.Lock()
	n.departed["r1"] = true
	n.viewMu.Unlock()
	if p := n.growTable(peers); p.ok || !slices.Equal(p.missing, []int{1}) {
		t.Fatalf("r1 just dropped: table ok %v, missing %v; want no table, missing [1]", p.ok, p.missing)
	}
	for _, how := range []string{"reported", "gone"} {
		n.mu.Lock()
		n.reported["r1"] = how == "reported"
		n.mu.Unlock()
		n.viewMu.Lock()
		n.gone["r1"] = how == "gone"
		n.viewMu.Unlock()
		p := n.growTable(peers)
		var names []string
		for _, m := range p.members {
			names = append(names, m.Name)
		}
		if want := []string{n.Name(), "r2"}; !p.ok || !slices.Equal(names, want) {
			t.Fatalf("r1 %s: table ok %v, %v; want %v", how, p.ok, names, want)
		}
	}
}

// TestGrowTablePrefersRestart: of two live nodes claiming a rank that is
// not in the world, a restart not yet admitted (Joining) wins over the
// incarnation the job went on without (Joiners counts only the restart),
// whatever their names, also where this node does not know that the job
// went on without it (neither was a member of its worlds: not r2). Before,
// the smaller name won: a Grow for the restart took the old incarnation
// half the time, and waited for it.
func TestGrowTablePrefersRestart(t *testing.T) {
	cfg := testConfig("growrestart", 0, 3)
	n, _ := nodeOfThree(t, cfg, 2)
	n.install(World{Rank: 0, Size: 2, Epoch: 3, Members: []Member{{Rank: 0, Name: n.Name(), Addr: n.Addr()}, {Rank: 1, Name: "r1", Addr: "127.0.0.1:1"}}})
	me := peer{name: n.Name(), addr: n.Addr(), meta: meta{Rank: 0, Size: 3, JobID: cfg.JobID}}
	r1 := peer{name: "r1", addr: "127.0.0.1:1", meta: meta{Rank: 1, Size: 3, JobID: cfg.JobID}}
	for _, names := range [][2]string{{"r2-a", "r2-b"}, {"r2-b", "r2-a"}} { // the old incarnation's name sorts first, then last
		old := peer{name: names[0], addr: "127.0.0.1:2", meta: meta{Rank: 2, Size: 3, JobID: cfg.JobID}}
		back := peer{name: names[1], addr: "127.0.0.1:3", meta: meta{Rank: 2, Size: 3, JobID: cfg.JobID, Joining: true}}
		p := n.growTable(map[string]peer{me.name: me, r1.name: r1, old.name: old, back.name: back})
		if !p.ok || len(p.members) != 3 || p.members[2].Name != back.name {
			t.Errorf("old %s, restart %s: table ok %v, %v; want rank 2 the restart", old.name, back.name, p.ok, p.members)
		}
	}
}

// TestGrowTableLeavesOutBehind: a live node the job went on without is not
// in the next world's table, as Joiners does not count it: a member of an
// earlier world of this node's that a later one left out (r2, behind), or
// a node whose meta says so (meta.Behind), even with no restart claiming
// its rank. On the side of a partition that does not go on (told of a
// world that goes on rather than its own: overtakenLocked), the other
// side's ranks are in it, so that its Grow finds out; a flagged node is
// not. Before, both were in it, and a Grow waited for their proposals.
func TestGrowTableLeavesOutBehind(t *testing.T) {
	cfg := testConfig("growbehind", 0, 4)
	n, _ := nodeOfThree(t, cfg, 2)
	n.install(World{Rank: 0, Size: 2, Epoch: 3, Members: []Member{{Rank: 0, Name: n.Name(), Addr: n.Addr()}, {Rank: 1, Name: "r1", Addr: "127.0.0.1:1"}}})
	me := peer{name: n.Name(), addr: n.Addr(), meta: meta{Rank: 0, Size: 4, JobID: cfg.JobID}}
	r1 := peer{name: "r1", addr: "127.0.0.1:1", meta: meta{Rank: 1, Size: 4, JobID: cfg.JobID}}
	r2 := peer{name: "r2", addr: "127.0.0.1:2", meta: meta{Rank: 2, Size: 4, JobID: cfg.JobID}}
	r3 := peer{name: "r3-flagged", addr: "127.0.0.1:3", meta: meta{Rank: 3, Size: 4, JobID: cfg.JobID, Behind: true}}
	peers := map[string]peer{me.name: me, r1.name: r1, r2.name: r2, r3.name: r3}
	names := func(p proposal) []string {
		var s []string
		for _, m := range p.members {
			s = append(s, m.Name)
		}
		return s
	}
	if p, want := n.growTable(peers), []string{n.Name(), "r1"}; !p.ok || !slices.Equal(names(p), want) {
		t.Errorf("table ok %v, %v; want %v (r2 behind, r3 flagged), notes %q", p.ok, names(p), want, p.notes)
	}
	n.mu.Lock()
	n.runs["r2"] = World{Epoch: 3, Size: 3, Digest: [digestLen]byte{1}} // a larger world of this epoch without this node
	n.mu.Unlock()
	if p, want := n.growTable(peers), []string{n.Name(), "r1", "r2"}; !p.ok || !slices.Equal(names(p), want) {
		t.Errorf("overtaken: table ok %v, %v; want %v (r2 of the side that goes on, r3 flagged), notes %q", p.ok, names(p), want, p.notes)
	}
}

// A member reported dead while cut off that comes back before the Shrink
// is kept in the next world (it is alive and answers); when it then
// crashes, every survivor reports it again, in the new world. Before,
// the report of the first world stood for the member in the next, and
// its crash went unreported: comm learnt of the dead rank only when its
// transport noticed.
func TestKeptMemberReportedAgain(t *testing.T) {
	const victim = 3
	nw := NewMemNetwork()
	nodes := startWorld(t, "kept-again", 4, func(_ int, c *Config) { c.Network = nw })
	nw.Cut(nodes[victim].Addr(), true)
	expectFailure(t, nodes, victim, ErrPeerDead, 15*time.Second)
	nw.Cut(nodes[victim].Addr(), false)
	waitInView(t, nodes[:victim], nodes[victim].Name(), 15*time.Second)
	for _, n := range nodes[:victim] {
		waitInView(t, nodes[victim:], n.Name(), 15*time.Second)
	}
	for i, w := range shrinkAll(t, nodes, 20*time.Second) {
		if w.Size != 4 || w.Rank != i || w.Epoch != 2 {
			t.Fatalf("rank %d: rank %d of %d in epoch %d after the cut healed, want rank %d of 4 in epoch 2", i, w.Rank, w.Size, w.Epoch, i)
		}
	}
	// Kept alive, it is not reported in the new world: a report left from
	// the cut (a cause of death, a view not yet mended) would show here.
	// This empties the survivors' reports; the cut rank's (it reported
	// the others while cut) are never read.
	time.Sleep(time.Second)
	for r, n := range nodes[:victim] {
		for len(n.Failures()) > 0 {
			if f := <-n.Failures(); f.Epoch == 2 {
				t.Fatalf("rank %d reported %+v (%v) in the new world while it runs", r, f, f.Err)
			}
		}
	}
	start := time.Now()
	nodes[victim].shutdown(false) // a crash: no leave message
	expectFailureIn(t, nodes, victim, 2, ErrPeerDead, 15*time.Second)
	t.Logf("the kept member's crash reported to all in %v", time.Since(start).Round(time.Millisecond))
}

// nodeR2Departed starts a node of job and returns it with a world of
// epoch 1, not installed: the node (rank 0) and two members that run
// nowhere, r1, never seen, and r2, which gossip saw and then dropped. The
// node is closed when the test ends.
func nodeR2Departed(t *testing.T, job string) (*Node, World) {
	t.Helper()
	n, err := Start(testConfig(job, 0, 3), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	n.viewMu.Lock()
	n.departed["r2"] = true
	n.viewMu.Unlock()
	return n, World{Rank: 0, Size: 3, Epoch: 1, Members: []Member{
		{Rank: 0, Name: n.Name(), Addr: n.Addr()},
		{Rank: 1, Name: "r1", Addr: "127.0.0.1:1"},
		{Rank: 2, Name: "r2", Addr: "127.0.0.1:2"},
	}}
}

// A member reported in one world (gossip dropped it here) and kept in
// the next (the coordinator's table holds it: others saw it alive), still
// out of this node's view, is reported in the next too, once its last
// call there goes unanswered as it did in the first.
func TestKeptMemberOutOfViewReportedAtInstall(t *testing.T) {
	n, w := nodeR2Departed(t, "kept-install")
	for ; w.Epoch <= 2; w.Epoch++ {
		n.install(w)
		select {
		case f := <-n.Failures():
			if f.Rank != 2 || !errors.Is(f.Err, ErrPeerDead) || f.Epoch != w.Epoch {
				t.Fatalf("failure %+v (%v), want rank 2 dead in epoch %d", f, f.Err, w.Epoch)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("the member out of the view is not reported in epoch %d", w.Epoch)
		}
	}
}

// The cause of death found for a member reported in one world (here, a
// lost member) is not the cause of its report in the next world, which
// kept it: that report names a death of its own.
func TestKeptMemberCauseNotCarried(t *testing.T) {
	n, w := nodeR2Departed(t, "kept-cause")
	n.mu.Lock()
	n.lost["r2"] = true
	n.mu.Unlock()
	for _, want := range []error{errLost, ErrPeerDead} {
		n.install(w)
		select {
		case f := <-n.Failures():
			var op *OpError
			if f.Rank != 2 || f.Epoch != w.Epoch || !errors.As(f.Err, &op) || op.Err != want {
				t.Fatalf("failure %+v (%v), want rank 2 in epoch %d: %v", f, f.Err, w.Epoch, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("the member out of the view is not reported in epoch %d", w.Epoch)
		}
		w.Epoch++
	}
}
