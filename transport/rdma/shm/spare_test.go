//go:build linux

package shm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// segmentFds counts this process's connection-segment memfds.
func segmentFds(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if l, _ := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); strings.HasPrefix(l, "/memfd:gorun-shm-conn") {
			n++
		}
	}
	return n
}

// A connection takes its own segment from the device's spares when there
// are some (made off the handshake: spare.go), and Close frees the spares
// and a pending refill.
func TestSpareSegments(t *testing.T) {
	before := segmentFds(t)
	a, b, da, db := pair(t, rdma.Config{})
	a.Close()
	b.Close()
	dev := da.(*Device)
	dev.spares.fill(dev.cfg.RecvQueueDepth)
	dev.spares.mu.Lock()
	made := append([]spareSeg(nil), dev.spares.segs...)
	dev.spares.mu.Unlock()
	if len(made) != spareSegments {
		t.Fatalf("%d spares made, want %d", len(made), spareSegments)
	}
	ln, err := db.Listen(testCtx(t), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan error, 1)
	go func() {
		c, err := ln.Accept(testCtx(t))
		if err == nil {
			defer c.Close()
		}
		accepted <- err
	}()
	c, err := da.Dial(testCtx(t), ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if err := <-accepted; err != nil {
		t.Fatal(err)
	}
	if got := c.(*conn).local; got != made[len(made)-1].seg {
		t.Errorf("the connection made its own segment; the device held %d spares", len(made))
	}
	c.Close()
	dev.spares.mu.Lock()
	left, pending := len(dev.spares.segs), dev.spares.timer != nil
	dev.spares.mu.Unlock()
	if left != spareSegments-1 || !pending {
		t.Errorf("after a take: %d spares, refill pending %v; want %d and a refill", left, pending, spareSegments-1)
	}
	da.Close()
	db.Close()
	if after := segmentFds(t); after != before {
		t.Errorf("%d segment memfds open after Close, %d before", after, before)
	}
	dev.spares.mu.Lock()
	pending = dev.spares.timer != nil
	dev.spares.mu.Unlock()
	if pending {
		t.Errorf("a refill is still pending after Close")
	}
}
