package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"
)

// slowGossip makes memberlist's failure detector too slow to matter within
// the test's deadlines: only evidence (a refused connection) can remove a
// member.
func slowGossip(_ int, c *Config) {
	c.ProbeInterval = time.Minute
	c.ProbeTimeout = 30 * time.Second
}

// shrinkAll runs Shrink on every node concurrently.
func shrinkAll(t testing.TB, nodes []*Node, within time.Duration) []World {
	t.Helper()
	return agreeAll(t, nodes, within, (*Node).Shrink)
}

// agreeAll runs agree (Shrink or Grow) on every node concurrently, within
// a deadline, and fails t if any of them fails.
func agreeAll(t testing.TB, nodes []*Node, within time.Duration, agree func(*Node, context.Context) (World, error)) []World {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	worlds := make([]World, len(nodes))
	errs := make([]error, len(nodes))
	done := make(chan struct{})
	for i, n := range nodes {
		go func() { worlds[i], errs[i] = agree(n, ctx); done <- struct{}{} }()
	}
	for range nodes {
		<-done
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return worlds
}

// A member whose process is gone (its gossip port refuses connections) is
// found by Suspect and the survivors shrink without it, long before
// memberlist would declare it dead; it is reported on Failures too. Only
// one survivor suspects it: the others learn it from that one's msgDead
// and check for themselves.
func TestSuspectFindsGoneMember(t *testing.T) {
	nodes := startWorld(t, "evidence", 4, slowGossip)
	nodes[2].shutdown(false) // its ports close, as a killed process's do
	nodes[0].Suspect(2)
	shrinkWithout(t, []*Node{nodes[0], nodes[1], nodes[3]}, 2, ErrPeerDead)
}

// shrinkWithout shrinks survivors, checks that they agree on a world of
// themselves, and that each reported rank gone of epoch 1 with an error
// that is want.
func shrinkWithout(t *testing.T, survivors []*Node, gone int, want error) {
	t.Helper()
	worlds := shrinkAll(t, survivors, 10*time.Second)
	for i, w := range worlds {
		if w.Size != len(survivors) || w.Rank != i || w.Digest != worlds[0].Digest {
			t.Errorf("survivor %d: world %+v", i, w)
		}
	}
	for _, n := range survivors {
		select {
		case f := <-n.Failures():
			if f.Rank != gone || f.Epoch != 1 || !errors.Is(f.Err, want) {
				t.Errorf("%s: failure %+v (%v), want rank %d of epoch 1: %v", n.Name(), f, f.Err, gone, want)
			}
		default:
			t.Errorf("%s: no failure report for rank %d", n.Name(), gone)
		}
	}
}

// A live member accepts the probe's connection (a frozen one would too,
// into its listen backlog): Suspect does not declare it gone.
func TestSuspectSparesLiveMember(t *testing.T) {
	nodes := startWorld(t, "evidence-live", 3, slowGossip)
	nodes[0].Suspect(1)
	nodes[2].Suspect(1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	select {
	case f := <-nodes[0].Failures():
		t.Fatalf("a live member was reported: %+v", f)
	case <-ctx.Done():
	}
	// All three agree on a world of three: nobody was excluded.
	for i, w := range shrinkAll(t, nodes, 10*time.Second) {
		if w.Size != 3 || w.Rank != i {
			t.Errorf("node %d: world %+v", i, w)
		}
	}
}

// A member that is gone when the survivors shrink, and that nobody
// suspects, is found by the agreement's own probes of the members it waits
// for (the coordinator waits for its proposal).
func TestShrinkProbesSilentMember(t *testing.T) {
	nodes := startWorld(t, "evidence-abandon", 4, slowGossip)
	nodes[3].shutdown(false)
	// Nobody suspects rank 3: the agreement's own probes must find it,
	// while it waits for rank 3's proposal.
	survivors := nodes[:3]
	worlds := shrinkAll(t, survivors, 10*time.Second)
	for i, w := range worlds {
		if w.Size != 3 || w.Rank != i || w.Digest != worlds[0].Digest {
			t.Errorf("survivor %d: world %+v", i, w)
		}
	}
}

// A member whose process ended while another process took its gossip port
// (a restarted seed rank binds the job's seed address at once) accepts the
// probe's connection. A node that knows the process ended (Config.Ended:
// comm reads /proc on the member's host) believes that instead, reports
// it as a witness does, and the others believe it too: the survivors
// shrink without it. Before, such a probe found the port open and only
// memberlist's verdict (about 1 s later in the chaos soak; never here,
// slowGossip) removed it.
func TestSuspectEndedMemberWithItsPortTaken(t *testing.T) {
	nodes := startWorld(t, "evidence-port-taken", 4, func(i int, c *Config) {
		slowGossip(i, c)
		if i == 0 {
			c.Ended = func(m Member) bool { return m.Rank == 2 }
		}
	})
	addr := nodes[2].Addr()
	nodes[2].shutdown(false)
	var ln net.Listener
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var err error
		if ln, err = net.Listen("tcp", addr); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("taking rank 2's gossip port %s: %v", addr, err)
		}
	}
	defer ln.Close()
	go func() { // accept as a live process does
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	nodes[0].Suspect(2)
	shrinkWithout(t, []*Node{nodes[0], nodes[1], nodes[3]}, 2, errStopped)
}

// A restarted rank binds its old gossip address (the seed rank, the job's
// seed address, at once). A member with no process table to read (another
// host: no Config.Ended) finds that port open; the new node of the job at
// the address is its evidence that the old process ended. Without it the
// survivors waited for memberlist's suspicion (here, with probes a minute
// apart, for ever). suspect: a broken link's Suspect probes it; noticed:
// no call, the restarted node's arrival in a view has it probed.
func TestMemberWhoseAddressIsTaken(t *testing.T) {
	for _, suspect := range []bool{true, false} {
		t.Run(map[bool]string{true: "suspect", false: "noticed"}[suspect], func(t *testing.T) {
			job := fmt.Sprintf("evidence-addr-taken-%t", suspect)
			nodes := startWorld(t, job, 4, slowGossip)
			addr := nodes[0].Addr()
			nodes[0].shutdown(false)
			cfg := testConfig(job, 0, 4)
			slowGossip(0, &cfg)
			_, port, _ := splitAddr(addr)
			cfg.BindPort, cfg.Seeds, cfg.Restarted = int(port), []string{nodes[1].Addr()}, true
			var back *Node
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				var err error
				if back, err = Start(cfg, []byte("blob again")); err == nil {
					break
				} else if time.Now().After(deadline) {
					t.Fatalf("restarting rank 0 at %s: %v", addr, err)
				}
			}
			t.Cleanup(func() { back.Close() })
			survivors := nodes[1:]
			if suspect {
				waitInView(t, survivors, back.Name(), 15*time.Second)
				survivors[0].Suspect(0)
				shrinkWithout(t, survivors, 0, errTaken)
				return
			}
			for _, n := range survivors {
				select {
				case f := <-n.Failures():
					if f.Rank != 0 || !errors.Is(f.Err, errTaken) {
						t.Errorf("%s: failure %+v (%v), want rank 0: %v", n.Name(), f, f.Err, errTaken)
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("%s: rank 0 not reported", n.Name())
				}
			}
		})
	}
}

// Only a restart at a member's address is evidence that the member ended
// (addrTaken). A process back from a cut hands out its old view in its
// push/pull, with the nodes that left while it was away as alive: the
// seed rank's first process among them, at the address its restart took.
// A member that never saw that one leave counted the restart, alive at
// its address, as ended, and the Grow waited out its context without it
// (the two tests of leftBehindUntold, with the seed rank restarted at its
// address: 7 of 16 runs). Such a stale node is of an old world, not
// Joining.
func TestAddrTakenOnlyByARestart(t *testing.T) {
	const addr = "127.0.0.1:7946"
	for _, tc := range []struct {
		name  string
		other peer
		taken bool
	}{
		{"restart", peer{name: "r0-new", addr: addr, meta: meta{Rank: 0, Joining: true}}, true},
		{"stale first process", peer{name: "r0-first", addr: addr, meta: meta{Rank: 0}}, false},
		{"restart elsewhere", peer{name: "r0-new", addr: "127.0.0.1:7947", meta: meta{Rank: 0, Joining: true}}, false},
		{"member of the world", peer{name: "r1", addr: addr, meta: meta{Rank: 1, Joining: true}}, false},
	} {
		n := &Node{name: "r2", inWorld: map[string]int{"r0": 0, "r1": 1, "r2": 2}, peers: map[string]peer{
			"r0": {name: "r0", addr: addr, meta: meta{Rank: 0}},
			"r2": {name: "r2", addr: "127.0.0.1:7948", meta: meta{Rank: 2}},
		}}
		n.peers[tc.other.name] = tc.other
		if got := n.addrTaken("r0", addr); got != tc.taken {
			t.Errorf("%s: rank 0's address taken %v, want %v", tc.name, got, tc.taken)
		}
	}
}
