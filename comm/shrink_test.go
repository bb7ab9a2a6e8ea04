package comm

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/bootstrap"
)

// TestShrinkHonoursContext: three ranks made by Init (gossip, in this
// process); rank 2 closes, rank 0 calls Shrink with a 300 ms context and
// rank 1, alive, never calls it, so the survivors cannot agree. Shrink
// returns when its context ends, with an error of op "shrink" naming this
// rank that wraps the bootstrap's *FormError and context.DeadlineExceeded;
// the communicator stays aborted, so a later operation fails at once.
func TestShrinkHonoursContext(t *testing.T) {
	seed := "127.0.0.1:" + strconv.Itoa(initFreePort(t))
	job, token := "shrink-ctx-"+initRandomID(), initRandomID()
	cs := make([]*Comm, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for r := range 3 {
		wg.Go(func() {
			cs[r], errs[r] = initFromEnv(initTestCtx(t), initVars(initRankVars(r, 3, seed, job, token)), WithTimeout(30*time.Second))
		})
	}
	wg.Wait()
	for _, c := range cs {
		if c != nil {
			defer c.Close()
		}
	}
	mustAll(t, "init", errs)
	if err := cs[2].Close(); err != nil {
		t.Fatalf("rank 2: close: %v", err)
	}

	short, cancel := context.WithTimeout(initTestCtx(t), 300*time.Millisecond)
	defer cancel()
	type result struct {
		sub  *Comm
		err  error
		took time.Duration
	}
	res := make(chan result, 1)
	go func() {
		start := time.Now()
		sub, err := cs[0].Shrink(short)
		res <- result{sub, err, time.Since(start)}
	}()
	var got result
	select {
	case got = <-res:
	case <-time.After(10 * time.Second): // a hang, not a slow machine: the context ends after 300 ms
		t.Fatal("Shrink did not return 10 s after its 300 ms context ended")
	}
	t.Logf("Shrink returned after %v: %v", got.took.Round(time.Millisecond), got.err)
	if got.sub != nil {
		got.sub.Close()
		t.Fatal("Shrink agreed on a world without rank 1")
	}
	var re *RankError
	var fe *bootstrap.FormError
	if !errors.As(got.err, &re) || re.Op != "shrink" || re.Rank != 0 ||
		!errors.As(got.err, &fe) || !errors.Is(got.err, context.DeadlineExceeded) {
		t.Fatalf("Shrink whose context ended: %v, want a *RankError of op shrink, rank 0, wrapping a *bootstrap.FormError and context.DeadlineExceeded", got.err)
	}
	if err := cs[0].Barrier(initTestCtx(t)); !errors.Is(err, ErrAborted) {
		t.Errorf("an operation after the failed Shrink: %v, want ErrAborted", err)
	}
}
