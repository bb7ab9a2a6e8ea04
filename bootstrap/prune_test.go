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
