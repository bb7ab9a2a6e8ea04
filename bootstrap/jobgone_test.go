package bootstrap

import (
	"context"
	"errors"
	"testing"
	"time"
)

// startRestarted starts restarted nodes (Config.Restarted) of ranks of a
// job of size, the first its own seed, and runs Form on each with a
// context of within; it returns the outcomes in the order of ranks.
// maxSize, if not 0, is their Config.MaxSize.
func startRestarted(t *testing.T, job string, size, maxSize int, ranks []int, within time.Duration) []formResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	out := make(chan struct {
		i int
		formResult
	}, len(ranks))
	start := time.Now()
	var seed string
	for i, r := range ranks {
		cfg := testConfig(job, r, size)
		cfg.Restarted, cfg.MaxSize = true, maxSize
		if seed != "" {
			cfg.Seeds = []string{seed}
		}
		n, err := Start(cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		if seed == "" {
			seed = n.Addr()
		}
		go func() {
			w, err := n.Form(ctx)
			out <- struct {
				i int
				formResult
			}{i, formResult{w, err, time.Since(start)}}
		}()
	}
	res := make([]formResult, len(ranks))
	for range ranks {
		o := <-out
		res[o.i] = o.formResult
	}
	return res
}

// Two ranks restarted after the job's other ranks finished see each other
// and nobody else. Before, each counted the other as a live rank of the
// job and both waited for their deadline (gorun's minute: the reviewer's
// initkill with --max-restarts 1, "missing ranks [1 3]"); now a restarted
// rank not yet admitted (meta.Joining) does not count, and both get
// ErrJobGone aloneFor after the job's end, as a lone one does.
func TestRestartedRanksOfEndedJobFail(t *testing.T) {
	saved := aloneFor
	aloneFor = time.Second
	t.Cleanup(func() { aloneFor = saved })
	const job = "gone-two"
	for _, n := range startWorld(t, job, 4, nil) {
		n.Close() // the job ends
	}
	for i, res := range startRestarted(t, job, 4, 0, []int{0, 2}, 20*time.Second) {
		if !errors.Is(res.err, ErrJobGone) || !errors.Is(res.err, ErrNotFormed) {
			t.Errorf("restarted node %d after %v: %v, want ErrJobGone", i, res.at.Round(time.Millisecond), res.err)
		} else {
			t.Logf("restarted node %d after %v: %v", i, res.at.Round(time.Millisecond), res.err)
		}
	}
}

// Two ranks launched to grow a job (gorun --add-ranks 2 under --max-np:
// ranks at or above Size) after the job's ranks finished see each other
// and nobody else. They cannot form a first world, which is of the ranks
// below Size; as many as Size, each counted the other as one of the Size
// restarted ranks that can, and both waited for their deadline (gorun's
// minute, "rank 2 ≥ size"; helper-46 with examples/train -np 2 --max-np
// 4): now both get ErrJobGone aloneFor after the job's end.
func TestAddedRanksOfEndedJobFail(t *testing.T) {
	saved := aloneFor
	aloneFor = time.Second
	t.Cleanup(func() { aloneFor = saved })
	const job = "gone-added"
	for _, n := range startWorld(t, job, 2, func(_ int, c *Config) { c.MaxSize = 4 }) {
		n.Close() // the job ends
	}
	for i, res := range startRestarted(t, job, 2, 4, []int{2, 3}, 20*time.Second) {
		if !errors.Is(res.err, ErrJobGone) {
			t.Errorf("added node %d after %v: %v, want ErrJobGone", i, res.at.Round(time.Millisecond), res.err)
		}
	}
}

// Every rank of a job restarted (each Init failed: formloss.go) forms
// the first world: restarted ranks not yet admitted count when they are
// enough to form it.
func TestAllRanksRestartedForm(t *testing.T) {
	saved := aloneFor
	aloneFor = time.Second
	t.Cleanup(func() { aloneFor = saved })
	res := startRestarted(t, "all-restarted", 3, 0, []int{0, 1, 2}, 20*time.Second)
	for i, r := range res {
		if r.err != nil || r.w.Size != 3 || r.w.Rank != i || r.w.Digest != res[0].w.Digest {
			t.Errorf("restarted rank %d: %v (rank %d of %d)", i, r.err, r.w.Rank, r.w.Size)
		}
	}
}

// A restarted rank that a Grow admitted clears its Joining flag: the next
// restarted rank counts it as a live rank of the job (jobGone).
func TestAdmittedRankNotJoining(t *testing.T) {
	const job = "admitted"
	nodes := startWorld(t, job, 3, nil)
	nodes[2].shutdown(false)
	nodes[0].Suspect(2)
	survivors := nodes[:2]
	shrinkAll(t, survivors, 20*time.Second)
	cfg := testConfig(job, 2, 3)
	cfg.Seeds, cfg.Restarted = []string{nodes[0].Addr()}, true
	back, err := Start(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { back.Close() })
	formed := make(chan error, 1)
	go func() { _, err := back.Form(context.Background()); formed <- err }()
	waitJoiners(t, survivors, 20*time.Second)
	growAll(t, survivors, 20*time.Second)
	if err := <-formed; err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, n := range survivors {
		for {
			n.viewMu.Lock()
			q, ok := n.peers[back.Name()]
			n.viewMu.Unlock()
			if ok && !q.meta.Joining {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the admitted rank is still joining in its view", n.Name())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}
