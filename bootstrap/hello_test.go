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
	// no push/pull of each joiner.
	if tr := nodes[0].Traffic(); tr.StreamsAccepted >= uint64(size/4) {
		t.Errorf("seed accepted %d streams forming a world of %d: joins went by push/pull", tr.StreamsAccepted, size)
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
