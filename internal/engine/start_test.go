package engine

import (
	"runtime"
	"sync"
	"testing"
)

type countTask struct {
	wg   *sync.WaitGroup
	hold chan struct{}
	mu   *sync.Mutex
	ran  map[int]int
	id   int
}

func (t *countTask) Run() {
	<-t.hold
	t.mu.Lock()
	t.ran[t.id]++
	t.mu.Unlock()
	t.wg.Done()
}

// Start runs every task exactly once, also when more are waiting to be
// picked up than startQ holds: with one P, the goroutines it starts run
// only once the loop that starts them blocks.
func TestStartRunsEveryTaskOnce(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	n := 3 * cap(startQ)
	var wg sync.WaitGroup
	var mu sync.Mutex
	hold := make(chan struct{})
	ran := map[int]int{}
	wg.Add(n)
	for i := range n {
		Start(&countTask{wg: &wg, hold: hold, mu: &mu, ran: ran, id: i})
	}
	close(hold)
	wg.Wait()
	if len(ran) != n {
		t.Fatalf("%d of %d tasks ran", len(ran), n)
	}
	for id, k := range ran {
		if k != 1 {
			t.Fatalf("task %d ran %d times", id, k)
		}
	}
	if u := unstarted.Load(); u != 0 {
		t.Fatalf("unstarted %d after every task ran", u)
	}
}
