package comm

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// TestSleepingRankWakes: with a spin of 1 µs a rank waiting for a late peer
// arms its CQ and sleeps, and the completion that ends its wait is then
// dispatched by its device's watcher, not by its own poll: the watcher's
// dispatch must wake it (internal/engine, wakeEngine: the link's counters
// are release stores, so the watcher fences before it looks at sleeping).
// Each rank is late in turn, by 0-200 µs, and every call must return; a
// lost wake-up leaves a call asleep until the test's deadline.
func TestSleepingRankWakes(t *testing.T) {
	for _, tr := range []string{"mem", "tcp", "shm"} {
		t.Run(tr, func(t *testing.T) {
			cs := newLocal(t, 2, WithTransport(tr), WithSpin(time.Microsecond))
			ctx, cancel := context.WithTimeout(testCtx(t), time.Minute)
			defer cancel()
			const calls = 400
			errs := make(chan error, 2)
			for r := range 2 {
				go func() {
					rng := rand.New(rand.NewPCG(uint64(r), 7))
					v := []float64{0}
					for i := range calls {
						if i%2 == r { // late: the other rank arms and sleeps
							late := time.Duration(rng.IntN(200)) * time.Microsecond
							for start := time.Now(); time.Since(start) < late; {
							}
						}
						v[0] = float64(r + 1)
						if err := AllReduce(ctx, cs[r], v, v, Sum); err != nil {
							errs <- fmt.Errorf("rank %d, call %d: %w", r, i, err)
							return
						}
						if v[0] != 3 {
							errs <- fmt.Errorf("rank %d, call %d: got %v, want 3", r, i, v[0])
							return
						}
					}
					errs <- nil
				}()
			}
			for range 2 {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
