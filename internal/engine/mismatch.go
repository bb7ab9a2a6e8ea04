package engine

// Naming the rank that called differently.
//
// A receiver that finds a header of another call knows two signatures, its
// own and the sender's, but not which one is wrong. It records the
// evidence (rank → call hash) and sends it to every peer, which pass each
// piece on once and add their own: a rank that is running a call when the
// first evidence reaches it, or that starts one while the question is
// open, sends its own signature too. After mismatchWindow every rank that
// has evidence decides by majority: the culprit is the lowest rank whose
// call differs from the most common one. A rank whose view is a tie (it
// is probably one of the two that disagree) waits a window more, and more
// while the others' signatures are still coming, up to mismatchWaits
// windows; with two ranks, or a tie that stays, it names the sender the
// first evidence named. So a rank that passed a different count is named
// by everyone, not its neighbours.

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// mismatchWindow is how long evidence is collected before deciding;
// a rank whose view is a tie decides at most mismatchWaits windows after
// its first evidence.
const (
	mismatchWindow = 100 * time.Millisecond
	mismatchWaits  = 5
)

type mismatchState struct {
	mu      sync.Mutex
	sigs    map[int]uint32
	seen    map[[2]int]bool
	first   int    // culprit named by the first evidence
	named   bool   // first is set
	why     string // this rank's own observation, if any
	started bool
	waits   int         // windows waited
	open    atomic.Bool // evidence came and the engine has not failed: Run reports its call
}

// evidence records that rank det (calling dh) saw rank cul send a call
// with hash ch, passes it on, and starts the decision timer. det == cul
// is a rank's report of its own call.
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
	own, report := e.runningHash()
	if self := [2]int{e.Rank, e.Rank}; report && !m.seen[self] {
		m.seen[self] = true
		m.sigs[e.Rank] = own
		report = det != e.Rank // else this evidence carries own already
	} else {
		report = false
	}
	if why != "" && m.why == "" {
		m.why = why
	}
	if det != cul && !m.named {
		m.named, m.first = true, cul
	}
	start := !m.started
	m.started = true
	m.open.Store(true)
	m.mu.Unlock()
	e.sendEvidence(det, dh, cul, ch)
	if report {
		e.sendEvidence(e.Rank, own, e.Rank, own)
	}
	if start {
		time.AfterFunc(mismatchWindow, e.decideMismatch)
	}
}

// sendEvidence passes a piece of evidence to every peer, best effort.
func (e *Engine) sendEvidence(det int, dh uint32, cul int, ch uint32) {
	for i := range e.links {
		l := e.links[i].Load()
		if l != nil && !l.closed.Load() && !l.broken.Load() {
			l.sendCtrl3(ctrlMismatch, uint32(int32(det)), uint64(dh)<<32|uint64(ch), uint64(uint32(int32(cul))))
		}
	}
}

// reportCall sends the running call's signature while a mismatch is being
// decided (Run calls it as a call starts): a rank that was idle when the
// evidence came counts in the vote.
func (e *Engine) reportCall() {
	if own, ok := e.runningHash(); ok {
		e.evidence(e.Rank, own, e.Rank, own, "")
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
	m.waits++
	if (tie || !m.named) && (m.waits == 1 || len(m.sigs) < e.Size && m.waits < mismatchWaits) {
		// This rank's view is split (it is probably one of the two ranks
		// that disagree), or it has only reports of calls and not yet
		// the evidence they answer: ranks that see a majority decide
		// first and their notice will reach it, and the others'
		// signatures are still coming.
		m.mu.Unlock()
		time.AfterFunc(mismatchWindow, e.decideMismatch)
		return
	}
	culprit := m.first
	if !m.named { // reports only: name the lowest rank calling otherwise than this one
		own, ok := m.sigs[e.Rank]
		for r, h := range m.sigs {
			if ok && h != own && (!m.named || r < culprit) {
				culprit, m.named = r, true
			}
		}
	}
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
