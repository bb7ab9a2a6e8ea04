package soft

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// A poller that arms, looks once more and sleeps, racing with a watcher
// that takes the tokens and polls too (collectives' engine and device
// watcher), never sleeps through a completion. It failed when a Push
// cleared the armed flag after its completion had been polled: the late
// clear undid the next Arm.
func TestArmNoLostWakeup(t *testing.T) {
	q := NewCQ()
	var mu sync.Mutex
	var got atomic.Int64
	var sleeping atomic.Bool
	wake := make(chan struct{}, 1)
	var wcs [32]rdma.WC
	pollLocked := func() int {
		n := q.Poll(wcs[:])
		got.Add(int64(n))
		if n > 0 && sleeping.Load() {
			select {
			case wake <- struct{}{}:
			default:
			}
		}
		return n
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() { // the watcher
		for {
			select {
			case <-q.Notify():
				mu.Lock()
				for pollLocked() == len(wcs) {
				}
				mu.Unlock()
			case <-stop:
				return
			}
		}
	}()
	n := int64(100000)
	if testing.Short() {
		n = 20000
	}
	go func() {
		for i := range n {
			q.Push(rdma.WC{WRID: uint64(i)})
			if i%7 == 0 {
				time.Sleep(time.Microsecond)
			}
		}
	}()
	for seen := int64(0); seen < n; {
		if mu.TryLock() {
			pollLocked()
			mu.Unlock()
		}
		if g := got.Load(); g > seen {
			seen = g
			sleeping.Store(false)
			continue
		}
		if !sleeping.Load() {
			sleeping.Store(true)
			q.Arm() // then look once more
			continue
		}
		select {
		case <-wake:
		case <-time.After(10 * time.Second):
			t.Fatalf("lost wake-up: %d of %d completions handled, %d queued", seen, n, q.Len())
		}
		sleeping.Store(false)
	}
}
