package bootstrap

import (
	"context"
	"testing"
	"time"
)

// TestHelloFormation forms a world just beyond helloAbove in one process:
// the joiners reach the seed by hello, not by a memberlist push/pull each
// (which costs the seed a stream per member), and a shrink after a
// member closes agrees although the views may not hold every member yet.
func TestHelloFormation(t *testing.T) {
	size := helloAbove + 8
	nw := NewMemNetwork()
	nodes := startWorld(t, "hello", size, func(i int, c *Config) {
		c.Network = nw
		// Ranks outnumber CPUs: relax probes as comm.Init does.
		c.ProbeInterval *= 8
		c.ProbeTimeout *= 8
	})
	// The root accepts its children's memberlist joins once formed, and
	// no push/pull of each joiner. Repeated agreement messages go over
	// streams beyond helloAbove members (msg.go, resend): those the
	// members opened, to the seed or not, do not count.
	var resent uint64
	for _, n := range nodes {
		resent += n.resent.Load()
	}
	if tr := nodes[0].Traffic(); tr.StreamsAccepted >= uint64(size/4)+resent {
		t.Errorf("seed accepted %d streams forming a world of %d (members resent %d): joins went by push/pull", tr.StreamsAccepted, size, resent)
	}
	last := nodes[size-1]
	last.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	errs := make(chan error, size-1)
	for _, n := range nodes[:size-1] {
		go func() {
			w, err := n.Shrink(ctx)
			if err == nil && (w.Size != size-1 || w.Epoch != 2) {
				t.Errorf("node %s: shrunk world of %d, epoch %d", n.Name(), w.Size, w.Epoch)
			}
			errs <- err
		}()
	}
	for range size - 1 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// TestInstallDropsTables: a member keeps the coordinator's table prepare
// (n members' records) only until the world it prepares is installed, and
// does not keep a late copy of it.
func TestInstallDropsTables(t *testing.T) {
	n, err := Start(testConfig("tables", 0, 2), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	w := World{Rank: 0, Size: 2, Epoch: 1, Members: []Member{
		{Rank: 0, Name: n.Name(), Addr: n.Addr()},
		{Rank: 1, Name: "r1", Addr: "127.0.0.1:1"},
	}}
	peers := map[string]peer{
		n.Name(): {name: n.Name(), addr: n.Addr(), meta: meta{Rank: 0, Size: 2, JobID: "tables"}},
		"r1":     {name: "r1", addr: "127.0.0.1:1", meta: meta{Rank: 1, Size: 2, JobID: "tables"}},
	}
	buf := encodeTable(n.Name(), &w, peers)
	if buf == nil {
		t.Fatal("table not encoded")
	}
	tables := func() int {
		n.mu.Lock()
		defer n.mu.Unlock()
		return len(n.tables)
	}
	n.gotTable(buf)
	if k := tables(); k != 1 {
		t.Fatalf("%d tables before install, want 1", k)
	}
	n.install(w)
	if k := tables(); k != 0 {
		t.Fatalf("%d tables after install, want 0", k)
	}
	n.gotTable(buf) // a late copy
	if k := tables(); k != 0 {
		t.Fatalf("%d tables after a late copy, want 0", k)
	}
}
