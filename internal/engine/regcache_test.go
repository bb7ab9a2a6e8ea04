package engine

import (
	"testing"

	"github.com/gorun-hpc/gorun/transport/rdma"
	_ "github.com/gorun-hpc/gorun/transport/rdma/mem"
)

func TestRegCache(t *testing.T) {
	dev, err := rdma.Open("mem")
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	c := NewRegCache(dev, 2)
	a, b, d := make([]byte, 100), make([]byte, 200), make([]byte, 300)
	mrA, err := c.Get(a)
	if err != nil || !mrA.Covers(a) || mrA.Access()&rdma.AccessRemoteWrite == 0 {
		t.Fatalf("Get(a) = %v, %v", mrA, err)
	}
	if again, _ := c.Get(a); again != mrA || c.Hits != 1 || c.Misses != 1 {
		t.Fatalf("second Get(a): %p vs %p, hits %d misses %d", again, mrA, c.Hits, c.Misses)
	}
	if mr, _ := c.Get(a[:50]); mr == mrA {
		t.Fatal("a different length must be a different key")
	}
	c.Get(b) // evicts the least recently used: a[:50]... then a
	c.Get(d)
	if c.Len() != 2 {
		t.Fatalf("cache holds %d registrations, bound 2", c.Len())
	}
	if mrA.Valid() {
		t.Fatal("evicted registration still valid")
	}
	if mr, _ := c.Get(nil); mr != nil {
		t.Fatal("empty buffer registered")
	}
	mrD, _ := c.Get(d)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if mrD.Valid() || c.Len() != 0 {
		t.Fatal("Close left registrations")
	}
}
