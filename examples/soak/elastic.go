package main

// -elastic: the soak under gorun --elastic --max-restarts, for chaos runs
// (scripts/chaos-soak.sh kills random ranks every few seconds). A failed
// step makes the survivors Shrink, agree on the step to redo and go on; a
// rank gorun restarted joins at the next control point (Grow) and receives
// the seed, the step and the deadline. Every step's result is still
// checked; a wrong result ends the run. Each recovery is logged as
//
//	soak: recovery: rank R (now r of n) step S: failure → first good step T ms (shrink U ms): ERR
//
// and each admission as "soak: grew to n ranks at step S (T ms)".

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"github.com/gorun-hpc/gorun/comm"
)

// drawAt is step iter of the sequence seed: a function of both alone, so
// ranks that agree on iter after a recovery run the same steps.
func drawAt(seed int64, iter, size, maxCount int) step {
	return draw(rand.New(rand.NewPCG(uint64(seed), uint64(iter))), iter, size, maxCount)
}

// shared is what a rank that was there tells the others (a newcomer).
type shared struct {
	seed, iter, deadline int64
}

// share makes every rank take the seed, step and deadline of the lowest
// rank that has them (fresh: this one has not).
func share(ctx context.Context, c *comm.Comm, s *shared, fresh bool) error {
	root := []int64{int64(c.Rank())}
	if fresh {
		root[0] = int64(c.Size())
	}
	if err := comm.AllReduce(ctx, c, root, root, comm.Min); err != nil {
		return err
	}
	v := []int64{s.seed, s.iter, s.deadline}
	if err := comm.Broadcast(ctx, c, v, int(root[0])%c.Size()); err != nil {
		return err
	}
	s.seed, s.iter, s.deadline = v[0], v[1], v[2]
	return nil
}

func soakElastic(ctx context.Context, c *comm.Comm, seed int64, duration time.Duration, maxCount int) (err error) {
	fresh := os.Getenv("GORUN_RESTART") != ""
	st := shared{seed: seed, deadline: time.Now().Add(duration).UnixNano()}
	if st.seed == 0 {
		st.seed = time.Now().UnixNano()
	}
	if err := share(ctx, c, &st, fresh); err != nil {
		return fmt.Errorf("rank %d: start: %w", c.Rank(), err)
	}
	if fresh {
		fmt.Printf("soak: rank %d rejoined as rank %d of %d at step %d\n", c.Rank(), c.Rank(), c.Size(), st.iter)
	} else if c.Rank() == 0 {
		fmt.Printf("soak: elastic, %d ranks, seed %d, %v, counts up to %d\n", c.Size(), st.seed, duration, maxCount)
	}
	defer func() { c.Close() }()
	steps, recoveries := 0, 0
	var failedAt time.Time // a recovery in progress: when the step failed
	var failErr error
	var shrinkTook time.Duration
	for {
		if st.iter%16 == 0 && failedAt.IsZero() {
			more := []int32{0}
			if time.Now().UnixNano() < st.deadline {
				more[0] = 1
			}
			k := []int64{int64(c.Joiners())}
			err := comm.Broadcast(ctx, c, more, 0)
			if err == nil {
				err = comm.AllReduce(ctx, c, k, k, comm.Max)
			}
			if err == nil && more[0] == 0 {
				break
			}
			if err == nil && k[0] > 0 {
				t0 := time.Now()
				var nc *comm.Comm
				if nc, err = c.Grow(ctx); err == nil {
					c = nc
					if err = share(ctx, c, &st, false); err == nil {
						fmt.Printf("soak: grew to %d ranks at step %d (%d ms)\n", c.Size(), st.iter, time.Since(t0).Milliseconds())
						continue // the control point again, with the newcomers (they start there)
					}
				}
			}
			if err != nil {
				if c, err = recoverFrom(ctx, c, err, &st, &failedAt, &failErr, &shrinkTook); err != nil {
					return err
				}
				continue
			}
		}
		s := drawAt(st.seed, int(st.iter), c.Size(), maxCount)
		if _, err := run(ctx, c, s); err != nil {
			var wrong *wrongResult
			if errors.As(err, &wrong) {
				return fmt.Errorf("rank %d: %w", c.Rank(), err)
			}
			if c, err = recoverFrom(ctx, c, err, &st, &failedAt, &failErr, &shrinkTook); err != nil {
				return err
			}
			continue
		}
		if !failedAt.IsZero() {
			recoveries++
			fmt.Printf("soak: recovery: rank %d (now %d of %d) step %d: failure → first good step %d ms (shrink %d ms): %v\n",
				c.Rank(), c.Rank(), c.Size(), st.iter, time.Since(failedAt).Milliseconds(), shrinkTook.Milliseconds(), failErr)
			failedAt = time.Time{}
		}
		steps++
		st.iter++
	}
	fmt.Printf("soak: rank %d of %d: %d steps checked, %d recoveries, ended at step %d\n", c.Rank(), c.Size(), steps, recoveries, st.iter)
	return nil
}

// recoverFrom shrinks c after err and makes the survivors agree on the
// step to redo (the least one any of them failed at).
func recoverFrom(ctx context.Context, c *comm.Comm, err error, st *shared, failedAt *time.Time, failErr *error, took *time.Duration) (*comm.Comm, error) {
	if ctx.Err() != nil {
		return c, err
	}
	if failedAt.IsZero() {
		*failedAt, *failErr = time.Now(), err
	}
	for tries := 0; ; tries++ {
		t0 := time.Now()
		nc, serr := c.Shrink(ctx)
		if serr != nil {
			return c, fmt.Errorf("rank %d: shrink after %v: %w", c.Rank(), err, serr)
		}
		*took = time.Since(t0)
		c = nc
		it := []int64{st.iter}
		if serr = comm.AllReduce(ctx, c, it, it, comm.Min); serr == nil {
			st.iter = it[0]
			return c, nil
		}
		if tries == 3 {
			return c, fmt.Errorf("rank %d: still failing after %d shrinks: %w", c.Rank(), tries+1, serr)
		}
		err = serr
	}
}
