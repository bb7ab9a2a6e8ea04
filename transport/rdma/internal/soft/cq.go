package soft

import (
	"context"
	"sync"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// CQ is an unbounded FIFO of completions with a context-aware wait.
type CQ struct {
	mu     sync.Mutex
	items  []rdma.WC
	head   int
	err    error // set by Close: returned once the queue is drained
	signal chan struct{}
}

// NewCQ returns an empty completion queue.
func NewCQ() *CQ { return &CQ{signal: make(chan struct{}, 1)} }

// Push appends a completion. Pushing after Close is allowed (flushes).
func (q *CQ) Push(wc rdma.WC) {
	q.mu.Lock()
	q.items = append(q.items, wc)
	q.mu.Unlock()
	select {
	case q.signal <- struct{}{}:
	default:
	}
}

// Close makes Get return err once the queued completions are consumed.
func (q *CQ) Close(err error) {
	q.mu.Lock()
	if q.err == nil {
		q.err = err
	}
	q.mu.Unlock()
	select {
	case q.signal <- struct{}{}:
	default:
	}
}

// Poll returns the next completion without waiting.
func (q *CQ) Poll() (rdma.WC, bool, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.head < len(q.items) {
		wc := q.items[q.head]
		q.head++
		if q.head == len(q.items) {
			q.items, q.head = q.items[:0], 0
		}
		return wc, true, nil
	}
	return rdma.WC{}, false, q.err
}

// Get waits for the next completion, ctx's end, or Close.
func (q *CQ) Get(ctx context.Context) (rdma.WC, error) {
	for {
		wc, ok, err := q.Poll()
		if ok {
			return wc, nil
		}
		if err != nil {
			return rdma.WC{}, err
		}
		select {
		case <-q.signal:
		case <-ctx.Done():
			return rdma.WC{}, ctx.Err()
		}
	}
}

// Len is the number of queued completions.
func (q *CQ) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items) - q.head
}
