package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"
)

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
// epoch, and answered the process's ack of the first world, which it
// committed, with the commit.
func TestDroppedEpochAnswered(t *testing.T) {
	tellLost = func(*Node, string) bool { return true } // only the answer tells the process behind
	t.Cleanup(func() { tellLost = nil })                // every node of the test is closed by then
	nw := NewMemNetwork()
	nodes := startWorld(t, "dropped-epoch", 2, func(_ int, c *Config) { c.Network = nw })
	coord, old := nodes[0], nodes[1]
	first := coord.World()
	d := &delegate{coord}
	var last World
	for e := uint32(2); e <= 6; e++ { // worlds without old; r1-next's agreement state in each
		for _, kind := range []byte{msgPropose, msgAck} {
			d.NotifyMsg((&message{kind: kind, epoch: e, from: "r1-next", seq: uint64(e)}).encode())
		}
		last = installNames(coord, e, coord.Name(), "r1-next")
	}
	late := func(kind byte, epoch uint32, from string, digest [digestLen]byte) {
		d.NotifyMsg((&message{kind: kind, epoch: epoch, digest: digest, from: from, seq: 1 << 40}).encode())
	}
	late(msgAck, 2, "r1-next", last.Digest) // a member's, late: dropped
	late(msgAck, first.Epoch, old.Name(), first.Digest)
	coord.mu.Lock()
	var epochs []uint32
	for _, book := range []map[uint32]map[string][digestLen]byte{coord.proposals, coord.acks} {
		epochs = append(epochs, slices.Sorted(maps.Keys(book))...)
	}
	epochs = append(epochs, slices.Sorted(maps.Keys(coord.committed))...)
	coord.mu.Unlock()
	if want := []uint32{5, 6, 5, 6}; !slices.Equal(epochs, want) {
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
		late(msgAck, first.Epoch, old.Name(), first.Digest) // as its agreement repeats it
		time.Sleep(50 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := old.Shrink(ctx); !errors.Is(err, ErrExpelled) {
		t.Errorf("the process behind's Shrink: %v, want ErrExpelled", err)
	}
}

// TestForgetOutOfWorld: an install drops what a node keeps about
// processes that are not members of the world (forgetLocked) and keeps
// it for its members, and a probe that runs.
func TestForgetOutOfWorld(t *testing.T) {
	n, err := Start(testConfig("forget", 0, 4), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	installNames(n, 1, n.Name(), "r1-in", "r2-out")
	n.mu.Lock()
	for _, name := range []string{"r1-in", "r2-out", "r3-out"} {
		for _, m := range []map[string]bool{n.reported, n.stopped, n.refused, n.taken, n.lost, n.leaving} {
			m[name] = true
		}
		n.abandoned[name] = &AbandonError{Cause: -1}
		n.probes[name] = &probeState{}
	}
	n.probes["r4-probed"] = &probeState{busy: true}
	n.mu.Unlock()
	installNames(n, 2, n.Name(), "r1-in")
	n.mu.Lock()
	defer n.mu.Unlock()
	for what, names := range map[string][]string{
		"reported": slices.Sorted(maps.Keys(n.reported)), "stopped": slices.Sorted(maps.Keys(n.stopped)),
		"refused": slices.Sorted(maps.Keys(n.refused)), "taken": slices.Sorted(maps.Keys(n.taken)),
		"lost": slices.Sorted(maps.Keys(n.lost)), "leaving": slices.Sorted(maps.Keys(n.leaving)),
		"abandoned": slices.Sorted(maps.Keys(n.abandoned)),
	} {
		if !slices.Equal(names, []string{"r1-in"}) {
			t.Errorf("%s holds %v, want [r1-in]", what, names)
		}
	}
	if probes := slices.Sorted(maps.Keys(n.probes)); !slices.Equal(probes, []string{"r1-in", "r4-probed"}) {
		t.Errorf("probes of %v, want [r1-in r4-probed]", probes)
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
