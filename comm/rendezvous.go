package comm

import (
	"context"
	"fmt"
	"sync"
)

// rendezvous is how newComm meets the other ranks of a job: Init's
// implementation gossips through the bootstrap, NewLocal's is in-process,
// Split's runs over the parent communicator.
type rendezvous interface {
	rank() int
	size() int
	// exchange is an allgather of small blobs (each ≤ maxBlob bytes)
	// across the job; newComm calls it exactly once.
	exchange(ctx context.Context, mine []byte) ([][]byte, error)
}

// sharedEndpoints is a rendezvous whose ranks share one decoding of the
// exchanged blobs (NewLocal's: each rank decoding all n took n² endpoints,
// and a 4,096-rank world peaked at 14.5 GiB with them, 7.1 without).
type sharedEndpoints interface {
	endpoints() ([]*endpoint, error)
}

// endpointsOf decodes the blobs rv's exchange returned, or takes rv's
// shared decoding of them.
func endpointsOf(rv rendezvous, blobs [][]byte) ([]*endpoint, error) {
	if s, ok := rv.(sharedEndpoints); ok {
		return s.endpoints()
	}
	return decodeEndpoints(blobs)
}

// decodeEndpoints decodes every rank's endpoint blob.
func decodeEndpoints(blobs [][]byte) ([]*endpoint, error) {
	eps := make([]*endpoint, len(blobs))
	for r, b := range blobs {
		var err error
		if eps[r], err = unmarshalEndpoint(b); err != nil {
			return nil, &RankError{Rank: r, Op: "init", Err: err}
		}
	}
	return eps, nil
}

// maxBlob bounds an endpoint blob.
const maxBlob = 320

// localRendezvous connects n goroutines of one process.
type localRendezvous struct {
	r    int
	hall *localHall
}

type localHall struct {
	n     int
	mu    sync.Mutex
	blobs [][]byte
	got   int
	done  chan struct{}

	// The endpoints, decoded once for all ranks (sharedEndpoints).
	decode sync.Once
	eps    []*endpoint
	epsErr error
}

// endpoints decodes the exchanged blobs once and gives every rank the same
// endpoints, which newComm and what it builds only read. Call after
// exchange returned them.
func (h *localHall) endpoints() ([]*endpoint, error) {
	h.decode.Do(func() { h.eps, h.epsErr = decodeEndpoints(h.blobs) })
	return h.eps, h.epsErr
}

func newLocalHall(n int) *localHall {
	return &localHall{n: n, blobs: make([][]byte, n), done: make(chan struct{})}
}

func (l *localRendezvous) endpoints() ([]*endpoint, error) { return l.hall.endpoints() }

func (l *localRendezvous) rank() int { return l.r }
func (l *localRendezvous) size() int { return l.hall.n }

func (l *localRendezvous) exchange(ctx context.Context, mine []byte) ([][]byte, error) {
	if len(mine) > maxBlob {
		return nil, fmt.Errorf("gorun: endpoint blob of %d bytes exceeds %d", len(mine), maxBlob)
	}
	h := l.hall
	h.mu.Lock()
	h.blobs[l.r] = append([]byte(nil), mine...)
	h.got++
	if h.got == h.n {
		close(h.done)
	}
	h.mu.Unlock()
	select {
	case <-h.done:
		return h.blobs, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
