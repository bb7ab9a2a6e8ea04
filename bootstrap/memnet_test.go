package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestMemNetworkWorld forms, and shrinks, a world over a MemNetwork: the
// same agreement as over UDP, with traffic counted.
func TestMemNetworkWorld(t *testing.T) {
	nw := NewMemNetwork()
	nodes := startWorld(t, "memnet", 6, func(i int, c *Config) { c.Network = nw })
	defer closeAll(nodes)
	for _, n := range nodes {
		if tr := n.Traffic(); tr.PacketsSent == 0 || tr.PacketsRecv == 0 || tr.StreamsOpened+tr.StreamsAccepted == 0 {
			t.Errorf("node %s: traffic %+v: no packets or streams counted", n.Name(), tr)
		}
	}
	nodes[5].Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := make([]error, 5)
	var wg sync.WaitGroup
	for i, n := range nodes[:5] {
		wg.Go(func() {
			w, err := n.Shrink(ctx)
			if err == nil && (w.Size != 5 || w.Epoch != 2) {
				err = fmt.Errorf("node %s: shrunk to %d ranks, epoch %d", n.Name(), w.Size, w.Epoch)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("shrink: %v", err)
	}
}

// TestMemNetworkDeliveryRules: a packet is copied and queued; one to an
// address nobody holds, or to a full queue, is lost and counted; a dial
// to nobody is refused; after Shutdown the port is free again.
func TestMemNetworkDeliveryRules(t *testing.T) {
	nw := NewMemNetwork()
	a, err := nw.attach(0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := nw.attach(0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nw.attach(b.port); !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("attach to a held port: %v, want EADDRINUSE", err)
	}
	msg := []byte("ping")
	if _, err := a.WriteTo(msg, b.addr.String()); err != nil {
		t.Fatal(err)
	}
	msg[0] = 'X'
	if p := <-b.PacketCh(); string(p.Buf) != "ping" || p.From.String() != a.addr.String() {
		t.Fatalf("got %q from %s, want \"ping\" from %s", p.Buf, p.From, a.addr)
	}
	for range memQueue + 3 {
		_, _ = a.WriteTo(msg, b.addr.String())
	}
	_, _ = a.WriteTo(msg, "127.0.0.1:9")
	if lost := a.pktLost.Load(); lost != 4 {
		t.Fatalf("%d packets lost, want 4 (3 over the queue, 1 to nobody)", lost)
	}
	if _, err := a.DialTimeout("127.0.0.1:9", time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial nobody: %v, want ECONNREFUSED", err)
	}

	done := make(chan error, 1)
	go func() {
		c := <-b.StreamCh()
		defer c.Close()
		_, err := io.Copy(c, io.LimitReader(c, 5))
		done <- err
	}()
	c, err := a.DialTimeout(b.addr.String(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 5)
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "hello" {
		t.Fatalf("echo: %q, %v", got, err)
	}
	c.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if a.streamOut.Load() != 5 || b.streamIn.Load() != 5 || a.dialled.Load() != 1 || b.accepted.Load() != 1 {
		t.Fatalf("stream counts: out %d in %d dialled %d accepted %d", a.streamOut.Load(), b.streamIn.Load(),
			a.dialled.Load(), b.accepted.Load())
	}

	// A dial that nobody accepts times out rather than hanging.
	if _, err := a.DialTimeout(b.addr.String(), 10*time.Millisecond); err == nil {
		t.Fatal("dial with no acceptor succeeded")
	}
	b.Shutdown()
	if _, err := a.DialTimeout(b.addr.String(), time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial a closed node: %v, want ECONNREFUSED", err)
	}
	if _, err := nw.attach(b.port); err != nil {
		t.Fatalf("port of a closed node not free: %v", err)
	}
}
