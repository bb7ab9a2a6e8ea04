package bootstrap

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A rank that died is restarted (a new node with the same rank) after the
// survivors shrank; they see it as a joiner, grow, and the world is whole
// again with every rank where it started, the restarted one included.
// Then the original seed (rank 0) dies and comes back as gorun restarts
// it: at its old address, which is the others' seed and its own, so it
// joins nobody; the survivors find the seed missing and join it again
// (seeds.go).
func TestGrowAdmitsRestartedRank(t *testing.T) {
	const job = "grow"
	nodes := startWorld(t, job, 4, nil)
	for _, victim := range []int{2, 0} {
		addr := nodes[victim].Addr()
		nodes[victim].shutdown(false)
		var survivors []*Node
		for r, n := range nodes {
			if r != victim {
				survivors = append(survivors, n)
			}
		}
		survivors[0].Suspect(victim) // (ranks of the full world are the original ones)
		for i, w := range shrinkAll(t, survivors, 20*time.Second) {
			if w.Size != 3 || w.Rank != i {
				t.Fatalf("survivor %d after shrink: world %+v", i, w)
			}
		}
		cfg := testConfig(job, victim, 4)
		cfg.Seeds = []string{survivors[0].Addr()}
		cfg.Restarted = true // as gorun's restart: the seed, alone until found, is not gone
		if victim == 0 {
			_, port, _ := splitAddr(addr)
			cfg.BindPort, cfg.Seeds = int(port), []string{addr}
		}
		back, err := Start(cfg, []byte("blob again"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { back.Close() })
		formed := make(chan error, 1)
		var bw World
		go func() {
			var err error
			bw, err = back.Form(context.Background())
			formed <- err
		}()
		waitJoiners(t, survivors, 20*time.Second) // then they grow
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		worlds := make([]World, len(survivors))
		errs := make([]error, len(survivors))
		done := make(chan struct{})
		for i, n := range survivors {
			go func() { worlds[i], errs[i] = n.Grow(ctx); done <- struct{}{} }()
		}
		for range survivors {
			<-done
		}
		cancel()
		if err := errors.Join(append(errs, <-formed)...); err != nil {
			t.Fatal(err)
		}
		if bw.Size != 4 || bw.Rank != victim || bw.Digest != worlds[0].Digest || bw.Members[victim].Name != back.Name() {
			t.Errorf("restarted rank %d: world %+v", victim, bw)
		}
		for i, w := range worlds {
			want := i + b2i(i >= victim)
			if w.Size != 4 || w.Rank != want || w.Digest != worlds[0].Digest {
				t.Errorf("survivor %d: rank %d of %d (epoch %d), want rank %d of 4", i, w.Rank, w.Size, w.Epoch, want)
			}
		}
		if back.Joiners() != 0 || survivors[0].Joiners() != 0 {
			t.Errorf("joiners left after Grow: %d, %d", back.Joiners(), survivors[0].Joiners())
		}
		nodes[victim] = back
	}
}

// A restarted rank (Config.Restarted) that the survivors never admit
// because they finish first: once every other rank of the job has left
// (Close) or died, or was gone before it started, its Form fails with
// ErrJobGone aloneFor after it finds itself alone, not at its context's
// end (gorun's timeout, a minute: CI, 2026-11-28, examples/train). A
// joiner that was not restarted waits for its context: the others may be
// calling Init again.
func TestJoinerOfEndedJobFails(t *testing.T) {
	saved := aloneFor
	aloneFor = time.Second
	t.Cleanup(func() { aloneFor = saved })
	for _, tc := range []struct {
		name               string
		before, leave, not bool // survivors gone before it starts; they leave (else die); not restarted
	}{
		{name: "left", leave: true},
		{name: "died"},
		{name: "gone-before", before: true, leave: true},
		{name: "not-restarted", leave: true, not: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const victim = 2
			job := "gone-" + tc.name
			nodes := startWorld(t, job, 3, nil)
			nodes[victim].shutdown(false)
			survivors := nodes[:victim]
			survivors[0].Suspect(victim)
			shrinkAll(t, survivors, 20*time.Second)
			cfg := testConfig(job, victim, 3)
			cfg.Seeds = []string{survivors[0].Addr()}
			cfg.Restarted = !tc.not
			if tc.before {
				for _, n := range survivors {
					n.shutdown(tc.leave)
				}
			}
			back, err := Start(cfg, []byte("blob again"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { back.Close() })
			if !tc.before {
				waitJoiners(t, survivors, 20*time.Second)
				for _, n := range survivors {
					n.shutdown(tc.leave) // the job ends without admitting it
				}
			}
			wait := 20 * time.Second
			if tc.not {
				wait = 3 * aloneFor
			}
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			t0 := time.Now()
			_, err = back.Form(ctx)
			if tc.not {
				if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrJobGone) {
					t.Fatalf("Form = %v after %v, want its context's end", err, time.Since(t0))
				}
				return
			}
			if !errors.Is(err, ErrJobGone) || !errors.Is(err, ErrNotFormed) {
				t.Fatalf("Form = %v after %v, want ErrJobGone", err, time.Since(t0))
			}
			t.Logf("%v after %v", err, time.Since(t0).Round(time.Millisecond))
		})
	}
}

// waitJoiners waits until each of nodes sees a joiner (Joiners), for up
// to within in all.
func waitJoiners(t *testing.T, nodes []*Node, within time.Duration) {
	t.Helper()
	waitJoinersN(t, nodes, 1, within)
}

// waitJoinersN waits until each of nodes sees k joiners, for up to
// within in all.
func waitJoinersN(t *testing.T, nodes []*Node, k int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for _, n := range nodes {
		for n.Joiners() < k {
			if time.Now().After(deadline) {
				t.Fatalf("%s never saw %d restarted ranks (sees %d)", n.Name(), k, n.Joiners())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// A joiner that leaves before the members call Grow (an expelled rank on
// its way out, which their Joiners still counted: reliability's
// TestPartitionHealExpelsLoneRank in CI, 2026-11-30) is not admitted: the
// Grow agrees on the next epoch with the members alone, each at its rank.
func TestGrowAfterJoinerLeft(t *testing.T) {
	const job, victim = "grow-left", 2
	nodes := startWorld(t, job, 3, nil)
	nodes[victim].shutdown(false)
	survivors := nodes[:victim]
	survivors[0].Suspect(victim)
	shrunk := shrinkAll(t, survivors, 20*time.Second)
	back := startRestart(t, nil, job, victim, 3, survivors[0].Addr())
	t.Cleanup(func() { back.Close() })
	waitJoiners(t, survivors, 20*time.Second)
	back.Close()
	worlds := agreeAll(t, survivors, 20*time.Second, (*Node).Grow)
	for i, w := range worlds {
		if w.Size != 2 || w.Rank != i || w.Epoch != shrunk[i].Epoch+1 || w.Digest != worlds[0].Digest || w.Members[0].Name != survivors[0].Name() || w.Members[i].Name != survivors[i].Name() {
			t.Errorf("member %d after Grow: rank %d of %d (epoch %d), want rank %d of 2 (epoch %d)", i, w.Rank, w.Size, w.Epoch, i, shrunk[i].Epoch+1)
		}
		if k := survivors[i].Joiners(); k != 0 {
			t.Errorf("member %d: %d joiners after Grow", i, k)
		}
	}
}

// A restarted rank that a Grow's coordinator names the epoch to (msgEpoch)
// before gossip has shown it the job's members must not agree on a world
// without them in that epoch: it waits until its view holds them and joins
// their Grow. On two namespace hosts (reliability's partition tests, 2|2)
// a restarted rank's Init returned rank 0 of 1, and the members' next
// Grow, meeting its world of a later epoch than theirs, expelled them.
// Two cases: the hinted rank alone (it would coordinate a world of
// itself), and the second of two restarted ranks that see each other
// only (it would propose their world to the first, which would commit
// it). A third: the two, with the hinting member dropped from their views
// by gossip just after its hint ("departed", as a moment after a partition
// healed), which heardOutside passes over: the two must still not agree on
// a world of restarted ranks alone.
func TestRestartedRankHintedBeforeItSeesTheJob(t *testing.T) {
	for _, tc := range []struct {
		name     string
		size     int
		victims  []int // restarted, each seeing only the others; the last is hinted
		departed bool  // the restarted ranks' gossip dropped the hinting member
	}{{"alone", 3, []int{2}, false}, {"two", 4, []int{2, 3}, false}, {"two, hinter departed", 4, []int{2, 3}, true}} {
		t.Run(tc.name, func(t *testing.T) {
			job := "grow-hinted-" + tc.name
			nw := NewMemNetwork()
			nodes := startWorld(t, job, tc.size, func(_ int, c *Config) { c.Network = nw })
			for _, v := range tc.victims {
				nodes[v].shutdown(false)
			}
			survivors := nodes[:tc.victims[0]]
			for _, v := range tc.victims {
				survivors[0].Suspect(v)
			}
			shrunk := shrinkAll(t, survivors, 20*time.Second)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			backs := make([]*Node, len(tc.victims))
			formed := make([]chan formResult, len(tc.victims))
			for i, v := range tc.victims {
				cfg := testConfig(job, v, tc.size)
				cfg.Network = nw
				cfg.Seeds = []string{memAddr(65000)} // nobody there
				cfg.Restarted = true
				back, err := Start(cfg, []byte("blob again"))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { back.Close() })
				if i > 0 {
					if k, err := back.ml.Join([]string{backs[0].Addr()}); k == 0 {
						t.Fatalf("join the other restarted rank: %v", err)
					}
				}
				backs[i], formed[i] = back, make(chan formResult, 1)
				go func() {
					w, err := back.Form(ctx)
					formed[i] <- formResult{w: w, err: err}
				}()
			}
			epoch := shrunk[0].Epoch + 1
			hinted := backs[len(backs)-1]
			if tc.departed {
				for _, back := range backs {
					back.viewMu.Lock()
					back.departed[survivors[0].Name()] = true
					back.viewMu.Unlock()
				}
			}
			survivors[0].send(hinted.Name(), hinted.Addr(), message{kind: msgEpoch, epoch: epoch, from: survivors[0].Name()})
			for i := range backs {
				select {
				case r := <-formed[i]:
					t.Fatalf("restarted rank %d: Form returned before it saw the job: rank %d of %d (epoch %d), %v", tc.victims[i], r.w.Rank, r.w.Size, r.w.Epoch, r.err)
				case <-time.After(time.Second):
				}
			}
			for _, back := range backs {
				if k, err := back.ml.Join([]string{survivors[0].Addr()}); k == 0 {
					t.Fatalf("join: %v", err)
				}
			}
			waitJoinersN(t, survivors, len(backs), 20*time.Second)
			worlds := agreeAll(t, survivors, 20*time.Second, (*Node).Grow)
			for i, w := range worlds {
				if w.Size != tc.size || w.Rank != i || w.Epoch != epoch || w.Digest != worlds[0].Digest {
					t.Errorf("member %d after Grow: rank %d of %d (epoch %d), want rank %d of %d in epoch %d", i, w.Rank, w.Size, w.Epoch, i, tc.size, epoch)
				}
			}
			for i, v := range tc.victims {
				r := <-formed[i]
				if r.err != nil || r.w.Size != tc.size || r.w.Rank != v || r.w.Digest != worlds[0].Digest {
					t.Errorf("restarted rank %d: rank %d of %d (epoch %d), %v; want rank %d of the members' world", v, r.w.Rank, r.w.Size, r.w.Epoch, r.err, v)
				}
			}
		})
	}
}
