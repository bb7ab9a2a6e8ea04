package bootstrap

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

// Beyond scaleAbove members memberlist's dissemination is thinned and its
// push/pulls are rarer and get longer deadlines; up to it, nothing
// changes. (The handler queue stays at memberlist's 1,024: each queued
// message pins the 64 KiB buffer NetTransport read its packet into.)
func TestMemberlistConfigScales(t *testing.T) {
	for _, tc := range []struct {
		size, maxSize int
		mult, handoff int
		pushPull, tcp time.Duration
	}{
		{size: 4, mult: 4, handoff: 1024, pushPull: 2 * time.Second, tcp: 2 * time.Second},
		{size: 64, mult: 4, handoff: 1024, pushPull: 2 * time.Second, tcp: 2 * time.Second},
		{size: 64, maxSize: 100, mult: 4, handoff: 1024, pushPull: 10 * time.Second, tcp: 2 * time.Second},
		{size: 256, mult: 2, handoff: 1024, pushPull: 10 * time.Second, tcp: 2 * time.Second},
		{size: 1000, mult: 1, handoff: 1024, pushPull: 10 * time.Second, tcp: 4 * time.Second},
	} {
		c := testConfig("scale", 0, tc.size)
		c.MaxSize = tc.maxSize
		c, err := c.withDefaults()
		if err != nil {
			t.Fatal(err)
		}
		mc := c.memberlistConfig("r0")
		if mc.RetransmitMult != tc.mult || mc.HandoffQueueDepth != tc.handoff ||
			mc.PushPullInterval != tc.pushPull || mc.TCPTimeout != tc.tcp {
			t.Errorf("size %d (max %d): retransmit ×%d, handoff %d, push/pull %v, TCP %v; want ×%d, %d, %v, %v",
				tc.size, tc.maxSize, mc.RetransmitMult, mc.HandoffQueueDepth, mc.PushPullInterval, mc.TCPTimeout,
				tc.mult, tc.handoff, tc.pushPull, tc.tcp)
		}
	}
}

// A node whose gossip port another process holds fails Start with
// ErrPortInUse, naming the port, on the kernel's network (memberlist says
// so in words alone) and on a MemNetwork; any other failure is not that.
func TestStartPortInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	nw := NewMemNetwork()
	cfg := testConfig("in-use", 0, 2)
	cfg.Network, cfg.BindPort = nw, port
	held, err := Start(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	for _, nw := range []*MemNetwork{nil, nw} {
		cfg := testConfig("in-use", 0, 2)
		cfg.Network, cfg.BindPort = nw, port
		n, err := Start(cfg, nil)
		if err == nil {
			n.Close()
			t.Fatalf("network %v: Start at port %d, held: no error", nw != nil, port)
		}
		if !errors.Is(err, ErrPortInUse) || !strings.Contains(err.Error(), fmt.Sprintf("port %d", port)) {
			t.Errorf("network %v: %v; want ErrPortInUse naming port %d", nw != nil, err, port)
		}
	}
	if errors.Is(bindError(port, errors.New("no such interface")), ErrPortInUse) {
		t.Error("bindError took another failure for a port in use")
	}
}
