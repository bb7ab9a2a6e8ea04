package bootstrap

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// A finalize and init again in the same job (comm.Init after Close;
// torch's destroy_process_group then init_process_group): the ranks close
// their formed nodes and start new ones, same job id, same seed address,
// which form a first world again. A rank lost during that second formation
// ends it on the others at once, naming it, as in the first Init (see
// TestFormEndsWhenRankDies), not at their deadline (a minute here).
//
// victim: rank 3 starts its new node and crashes once seen (crash), or
// never starts one and its process ends, which the launcher reports
// (exited: Exited). slow: rank 2 has not closed its old, formed node yet
// while the others form anew; its node finds no member at the seed
// address and joins the seed again (seeds.go), so the new nodes get its
// push/pull state, the epoch of the old world.
func TestFormAgainEndsWhenRankDies(t *testing.T) {
	for _, tc := range []struct {
		name         string
		slow, exited bool
	}{
		{name: "crash"},
		{name: "exited", exited: true},
		{name: "slow-close/crash", slow: true},
		{name: "slow-close/exited", slow: true, exited: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const size, victim, slow = 4, 3, 2
			job := "form-again-" + tc.name
			nw := NewMemNetwork()
			old, out := formSome(t, nw, job, size, []int{0, 1, 2, 3}, 25*time.Second, nil)
			for r := range size {
				if res := <-out[r]; res.err != nil {
					t.Fatalf("first world, rank %d: %v", r, res.err)
				}
			}
			seedPort := old[0].ml.LocalNode().Port
			closing := old
			if tc.slow {
				closing = []*Node{old[0], old[1], old[3]}
			}
			closeAll(closing) // Close: they leave, formed

			ranks := []int{0, 1, victim}
			if tc.exited {
				ranks = []int{0, 1}
			}
			nodes, out := formSome(t, nw, job, size, ranks, 40*time.Second, func(r int, c *Config) {
				c.Finalized = old[r].World().Digest // as comm.Init sets it
				if r == 0 {
					c.BindPort = int(seedPort) // the seed address again
				}
			})
			survivors := nodes[:2]
			if tc.slow {
				waitInView(t, survivors, old[slow].Name(), 15*time.Second)
			}
			if tc.exited {
				for _, n := range survivors {
					n.Exited(victim, "exit status 1")
				}
			} else {
				waitInView(t, survivors, nodes[victim].Name(), 15*time.Second)
				nodes[victim].shutdown(false) // no leave: a crash
			}
			// Each survivor closes its node once its Form fails, as
			// comm.Init does: a member locked on the coordinator's world
			// may fail on the coordinator's leave, unformed, rather than
			// on the death itself (TestFormEndsWhenAwaitedRankDies).
			var wg sync.WaitGroup
			res := make([]formResult, len(survivors))
			for r, n := range survivors {
				wg.Go(func() {
					res[r] = <-out[r]
					n.Close()
				})
			}
			wg.Wait()
			for r, res := range res {
				var oe *OpError
				ok := errors.As(res.err, &oe) && (oe.Peer == victim && errors.Is(res.err, ErrPeerDead) ||
					r != 0 && oe.Peer == 0 && errors.Is(res.err, ErrPeerLeft))
				switch {
				case !ok || !errors.Is(res.err, ErrNotFormed):
					t.Errorf("rank %d after %v: %v; want a *FormError naming rank %d dead (or rank 0 left)", r, res.at.Round(time.Millisecond), res.err, victim)
				case res.at > 20*time.Second: // its deadline is a minute
					t.Errorf("rank %d failed after %v, at its deadline", r, res.at)
				default:
					t.Logf("rank %d after %v: %v", r, res.at.Round(time.Millisecond), res.err)
				}
			}
		})
	}
}

// A finalize and init again with every rank, one slow to close its old,
// formed node (TestFormAgainEndsWhenRankDies): the new world forms, of the
// new nodes.
func TestFormAgainSlowClose(t *testing.T) {
	const size, slow = 4, 2
	job := "form-again-slow"
	nw := NewMemNetwork()
	old, out := formSome(t, nw, job, size, []int{0, 1, 2, 3}, 25*time.Second, nil)
	for r := range size {
		if res := <-out[r]; res.err != nil {
			t.Fatalf("first world, rank %d: %v", r, res.err)
		}
	}
	seedPort := old[0].ml.LocalNode().Port
	closeAll([]*Node{old[0], old[1], old[3]})
	nodes, out := formSome(t, nw, job, size, []int{0, 1, 3}, 40*time.Second, func(r int, c *Config) {
		c.Finalized = old[r].World().Digest
		if r == 0 {
			c.BindPort = int(seedPort)
		}
	})
	waitInView(t, nodes[:2], old[slow].Name(), 15*time.Second)
	waitInView(t, nodes[:2], nodes[3].Name(), 15*time.Second)
	old[slow].Close()
	c := testConfig(job, slow, size)
	c.Network, c.Timeout, c.Seeds = nw, time.Minute, []string{nodes[0].Addr()}
	c.Finalized = old[slow].World().Digest
	n2, err := Start(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n2.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	out[slow] = make(chan formResult, 1)
	go func() {
		w, err := n2.Form(ctx)
		out[slow] <- formResult{w, err, 0}
	}()
	nodes[slow] = n2
	for r := range size {
		res := <-out[r]
		if res.err != nil {
			t.Errorf("rank %d: %v", r, res.err)
			continue
		}
		for _, m := range res.w.Members {
			if m.Name != nodes[m.Rank].Name() {
				t.Errorf("rank %d formed a world whose rank %d is %s, not the new node %s", r, m.Rank, m.Name, nodes[m.Rank].Name())
			}
		}
	}
}

// A node of the world this process finalized (Config.Finalized), its rank
// slow to close it, sends its leave (msgLeaving, with that world's epoch)
// to its members' last addresses, which the new nodes may hold (a seed's).
// The new world's first Shrink found this rank expelled, the leave's
// epoch (3) being past the one it agreed on (2). A leave of another world
// of that epoch, the job's own, still counts: the Shrink fails with
// ErrExpelled.
func TestFinalizedWorldsNewsIgnored(t *testing.T) {
	finalized := [digestLen]byte{7, 7, 7}
	for _, tc := range []struct {
		name     string
		digest   [digestLen]byte
		expelled bool
	}{
		{name: "finalized", digest: finalized},
		{name: "other", digest: [digestLen]byte{8}, expelled: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nodes := startWorld(t, "finalized-news-"+tc.name, 3, func(_ int, c *Config) { c.Finalized = finalized })
			defer closeAll(nodes)
			bye := message{kind: msgLeaving, epoch: 3, digest: tc.digest, from: "old-node-of-rank-2"}
			for _, n := range nodes[:2] {
				(&delegate{n}).NotifyMsg(bye.encode())
			}
			nodes[2].Close()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			errs := make([]error, 2)
			var wg sync.WaitGroup
			for i, n := range nodes[:2] {
				wg.Go(func() { _, errs[i] = n.Shrink(ctx) })
			}
			wg.Wait()
			for i, err := range errs {
				if got := errors.Is(err, ErrExpelled); got != tc.expelled || (!tc.expelled && err != nil) {
					t.Errorf("rank %d's Shrink after a leave of epoch 3 (digest %x…): %v; want expelled %v", i, tc.digest[:3], err, tc.expelled)
				}
			}
		})
	}
}
