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
		// The survivors wait until each sees the joiner, then grow.
		deadline := time.Now().Add(20 * time.Second)
		for _, n := range survivors {
			for n.Joiners() == 0 {
				if time.Now().After(deadline) {
					t.Fatalf("%s never saw the restarted rank", n.Name())
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
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
