package engine

// Naming the rank that called differently.
//
// A receiver that finds a header of another call knows two signatures, its
// own and the sender's, but not which one is wrong. It records the
// evidence (rank → call hash) and sends it to every peer, which pass each
// piece on once and add their own. After mismatchWindow every rank that
// has evidence decides by majority: the culprit is the lowest rank whose
// call differs from the most common one (with two ranks, or a tie, the
// sender the first evidence named, after waiting one more window for a
// rank with a clearer view). So a rank that passed a different count is
// named by everyone, not its neighbours.

import (
	"fmt"
	"sync"
	"time"
)

// mismatchWindow is how long evidence is collected before deciding.
const mismatchWindow = 100 * time.Millisecond

type mismatchState struct {
	mu      sync.Mutex
	sigs    map[int]uint32
	seen    map[[2]int]bool
	first   int    // culprit named by the first evidence
	why     string // this rank's own observation, if any
	started bool
	delayed bool
}

// evidence records that rank det (calling dh) saw rank cul send a call
// with hash ch, passes it on, and starts the decision timer.
func (e *Engine) evidence(det int, dh uint32, cul int, ch uint32, why string) {
	m := &e.mm
	m.mu.Lock()
	if m.sigs == nil {
		m.sigs, m.seen = map[int]uint32{}, map[[2]int]bool{}
	}
	key := [2]int{det, cul}
	if m.seen[key] {
		m.mu.Unlock()
		return
	}
	m.seen[key] = true
	m.sigs[det], m.sigs[cul] = dh, ch
	if own, ok := e.runningHash(); ok {
		m.sigs[e.Rank] = own
	}
	if why != "" && m.why == "" {
		m.why = why
	}
	start := !m.started
	if start {
		m.started, m.first = true, cul
	}
	m.mu.Unlock()
	for i := range e.links {
		l := e.links[i].Load()
		if l != nil && !l.closed.Load() && !l.broken.Load() {
			l.sendCtrl3(ctrlMismatch, uint32(int32(det)), uint64(dh)<<32|uint64(ch), uint64(uint32(int32(cul)))) // best effort
		}
	}
	if start {
		time.AfterFunc(mismatchWindow, e.decideMismatch)
	}
}

func (e *Engine) decideMismatch() {
	m := &e.mm
	m.mu.Lock()
	count := map[uint32]int{}
	for _, h := range m.sigs {
		count[h]++
	}
	best, bestN, tie := uint32(0), 0, false
	for h, n := range count {
		switch {
		case n > bestN:
			best, bestN, tie = h, n, false
		case n == bestN:
			tie = true
		}
	}
	if tie && !m.delayed {
		// This rank's view is split (it is probably one of the two ranks
		// that disagree); ranks that see a majority decide first and
		// their notice will reach it.
		m.delayed = true
		m.mu.Unlock()
		time.AfterFunc(mismatchWindow, e.decideMismatch)
		return
	}
	culprit := m.first
	if !tie && bestN > 1 {
		culprit = -1
		for r, h := range m.sigs {
			if h != best && (culprit < 0 || r < culprit) {
				culprit = r
			}
		}
		if culprit < 0 {
			culprit = m.first
		}
	}
	why := m.why
	m.mu.Unlock()
	if why == "" {
		why = "another rank received a message of a different call"
	}
	e.Abort(culprit, fmt.Errorf("%w: %s", ErrMismatch, why))
}

// runningHash is the hash of the call Run is executing, if any.
func (e *Engine) runningHash() (uint32, bool) {
	v := e.curHash.Load()
	return uint32(v), v>>32 == 1
}
