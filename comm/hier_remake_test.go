package comm

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/collectives"
)

// onSimHost places a rank made by Init on simulated host h, as withHosts
// does NewLocal's ranks, over tcp.
func onSimHost(h int) Option {
	return func(c *config) error {
		c.simHost = &[8]byte{'s', 'i', 'm', byte(h)}
		c.transport = "tcp"
		return nil
	}
}

// TestHierAfterShrinkAndGrow: four ranks made by Init (in this process,
// over tcp) on two simulated hosts, ranks 0-1 and 2-3. Rank 3 closes and
// the others Shrink (2+1 ranks); then rank 3 comes back through Init and
// they Grow (2x2). After each, every rank has the hierarchical
// sub-communicators, those of the communicator it came from are closed,
// and the collectives above the threshold run through them and give the
// results the flat ones give. Before, Shrink and Grow made flat
// communicators and left the old sub-communicators open until the new
// communicator closed.
func TestHierAfterShrinkAndGrow(t *testing.T) {
	cs, errs, start := initRanks(t, 4, func(r int) []Option { return []Option{onSimHost(r / 2)} })
	var live []*Comm // made by Shrink and Grow (initRanks closes Init's)
	defer func() {
		for _, c := range live {
			c.Close()
		}
	}()
	mustAll(t, "init", errs)
	checkHier(t, "init", cs, nil)
	if err := cs[3].Close(); err != nil {
		t.Fatalf("rank 3: close: %v", err)
	}

	old := hiersOf(cs[:3])
	shrunk := make([]*Comm, 3)
	ctx := initTestCtx(t)
	mustAll(t, "shrink", onAll(cs[:3], func(c *Comm) (err error) {
		shrunk[c.Rank()], err = c.Shrink(ctx)
		return err
	}))
	live = append(live, shrunk...)
	checkHier(t, "shrink", shrunk, old)

	old = hiersOf(shrunk)
	grown := growJoined(t, ctx, shrunk, func() (*Comm, error) { return start(3) })
	live = append(live, grown...)
	for r, c := range grown {
		if c.Rank() != r || c.Size() != 4 {
			t.Fatalf("grown rank %d is rank %d of %d", r, c.Rank(), c.Size())
		}
	}
	checkHier(t, "grow", grown, old)
	if grown[0].hier.back == nil {
		t.Errorf("grow: two even hosts, but no second cross communicator")
	}
}

// hiersOf returns each communicator's hierarchical sub-communicators.
func hiersOf(cs []*Comm) []*hierComms {
	hs := make([]*hierComms, len(cs))
	for r, c := range cs {
		hs[r] = c.hier
	}
	return hs
}

// checkHier checks that every rank of cs has hierarchical
// sub-communicators, that the old ones (of the communicators cs replaced)
// are closed with their watchers ended, and that the collectives run
// hierarchically above the threshold, with results right.
func checkHier(t *testing.T, what string, cs []*Comm, old []*hierComms) {
	t.Helper()
	for r, c := range cs {
		if c.hier == nil {
			t.Fatalf("%s: rank %d of %d has no hierarchical communicators", what, r, c.Size())
		}
		if !c.hierFor(collectives.AllReduce, hierMinBytes) || !c.hierFor(collectives.Broadcast, hierMinBytes) {
			t.Fatalf("%s: rank %d: allreduce and broadcast of %d bytes do not run hierarchically", what, r, hierMinBytes)
		}
	}
	for r, h := range old {
		select {
		case <-h.watched:
		default:
			t.Errorf("%s: rank %d: the old communicator's watchHier still runs", what, r)
		}
		for _, x := range h.subs() {
			select {
			case <-x.closing.done:
			default:
				t.Errorf("%s: rank %d: a sub-communicator of the old communicator (rank %d of %d) is open", what, r, x.rank, x.size)
			}
		}
	}
	seq := make([]uint32, len(cs))
	for r, c := range cs {
		seq[r] = c.hier.local.seq
	}
	for _, count := range hierCounts {
		mustAll(t, what+": collectives", onAll(cs, func(c *Comm) error { return checkCollectives(initTestCtx(t), c, count) }))
	}
	for r, c := range cs {
		if c.hier.local.seq == seq[r] {
			t.Errorf("%s: rank %d: no collective ran on its host-local communicator", what, r)
		}
	}
}

// TestRemakeHierFailedSplit: a member that leaves in the middle of
// remakeHier's Splits (rank 3 of two hosts of two takes part in the
// host-local Split, then closes) fails the others' communicator, which
// names it, promptly; none of them keeps a sub-communicator open or
// returns with hierarchical communicators.
func TestRemakeHierFailedSplit(t *testing.T) {
	cs := newLocal(t, 4, WithTimeout(20*time.Second))
	for _, c := range cs { // as if on two hosts (makeHierComms reads topo alone)
		c.topo = Topology{Hosts: [][]int{{0, 1}, {2, 3}}, HostOf: []int{0, 0, 1, 1}, NUMAOf: []int{-1, -1, -1, -1}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	took := make([]time.Duration, 4)
	mustAll(t, "remakeHier", onAll(cs, func(c *Comm) error {
		if c.Rank() == 3 {
			local, err := c.Split(ctx, 1, 3) // the first Split makeHierComms runs
			if err != nil {
				return err
			}
			local.Close()
			return c.Close()
		}
		t0 := time.Now()
		c.remakeHier(ctx, "test")
		took[c.Rank()] = time.Since(t0)
		return nil
	}))
	for r, c := range cs[:3] {
		err := c.Err()
		var re *RankError
		if !errors.As(err, &re) || re.Rank != 3 {
			t.Errorf("rank %d: after the failed Split the communicator's error is %v, want one naming rank 3", r, err)
		}
		if c.hier != nil {
			t.Errorf("rank %d: hierarchical communicators after a failed Split", r)
		}
		c.kidsMu.Lock()
		if len(c.kids) > 0 {
			t.Errorf("rank %d: %d sub-communicators left open", r, len(c.kids))
		}
		c.kidsMu.Unlock()
		if took[r] > 10*time.Second {
			t.Errorf("rank %d: remakeHier returned after %v", r, took[r])
		}
		t.Logf("rank %d: returned after %v: %v", r, took[r].Round(time.Millisecond), err)
	}
}
