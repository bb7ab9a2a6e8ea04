package soft

import (
	"context"
	"sync"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// CQ is an unbounded FIFO of completions. It serves both as a connection's
// private queue (Get, Next, Shut) and as a shared rdma.CQ (Poll, Arm,
// Notify, Close) that several connections push into.
type CQ struct {
	mu     sync.Mutex
	items  []rdma.WC
	head   int
	err    error // set by Shut: returned once the queue is drained
	signal chan struct{}

	armed     bool // guarded by mu: a token is owed to the next Push
	notify    chan struct{}
	closed    chan struct{}
	closeOnce sync.Once
}

// NewCQ returns an empty completion queue.
func NewCQ() *CQ {
	return &CQ{signal: make(chan struct{}, 1), notify: make(chan struct{}, 1), closed: make(chan struct{})}
}

// Push appends a completion. Pushing after Shut or Close is allowed (flushes).
func (q *CQ) Push(wc rdma.WC) {
	q.mu.Lock()
	q.items = append(q.items, wc)
	fire := q.armed
	q.armed = false
	q.mu.Unlock()
	select {
	case q.signal <- struct{}{}:
	default:
	}
	// Taken under mu with the append: a flag cleared later, by a Push
	// whose completion was already polled, would undo the next Arm.
	if fire {
		q.token()
	}
}

func (q *CQ) token() {
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

// Shut makes Get return err once the queued completions are consumed (a
// private queue whose connection ended).
func (q *CQ) Shut(err error) {
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

// Next returns the next completion without waiting; the error is Shut's
// once the queue is empty.
func (q *CQ) Next() (rdma.WC, bool, error) {
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

// Get waits for the next completion, ctx's end, or Shut.
func (q *CQ) Get(ctx context.Context) (rdma.WC, error) {
	for {
		wc, ok, err := q.Next()
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

// Poll implements rdma.CQ.
func (q *CQ) Poll(wcs []rdma.WC) int {
	q.mu.Lock()
	n := copy(wcs, q.items[q.head:])
	q.head += n
	if q.head == len(q.items) {
		q.items, q.head = q.items[:0], 0
	}
	q.mu.Unlock()
	return n
}

// Arm implements rdma.CQ. A completion already queued sends its token at
// once (stronger than verbs asks, which costs nothing here).
func (q *CQ) Arm() {
	q.mu.Lock()
	fire := q.head < len(q.items)
	q.armed = !fire
	q.mu.Unlock()
	if fire {
		q.token()
	}
}

// Notify implements rdma.CQ.
func (q *CQ) Notify() <-chan struct{} { return q.notify }

// Err implements rdma.CQ: a queue that grows loses no completion, so it
// never fails (Shut ends a private queue's Get, which is not this).
func (q *CQ) Err() error { return nil }

// Closed is closed by Close.
func (q *CQ) Closed() <-chan struct{} { return q.closed }

// Close implements rdma.CQ: it wakes a sleeper; queued completions stay
// readable.
func (q *CQ) Close() error {
	q.closeOnce.Do(func() { close(q.closed) })
	q.token()
	return nil
}

var _ rdma.CQ = (*CQ)(nil)
