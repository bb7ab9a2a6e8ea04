package engine

// Links made after the engine: a communicator connects a peer when a plan
// first needs it (package comm). AddLink may run on any goroutine, while
// a plan runs; Missing runs between plans, on the goroutine that runs them.

import (
	"errors"
	"slices"
)

// AddLink gives the engine a link to l.Peer, which had none. It fails with
// ErrClosed once the engine is closed, and with ErrProtocol for a peer out
// of range or already linked. A link added to an engine that has failed
// receives the failure's abort notice, so that a peer connecting late
// learns of it.
func (e *Engine) AddLink(l *Link) error {
	e.mu.Lock()
	switch {
	case e.closed:
		e.mu.Unlock()
		return ErrClosed
	case l.Peer < 0 || l.Peer >= e.Size || l.Peer == e.Rank || e.links[l.Peer].Load() != nil:
		e.mu.Unlock()
		return ErrProtocol
	}
	e.links[l.Peer].Store(l)
	list := append(slices.Clip(*e.linkList.Load()), l)
	e.linkList.Store(&list)
	e.mu.Unlock()
	l.attach(e)
	var pe *PeerError
	if err := e.Err(); errors.As(err, &pe) && !errors.Is(err, ErrClosed) {
		code, text := e.noticeOf(pe.Rank, pe.Err)
		l.sendAbort(pe.Rank, code, text, e.note())
	}
	return nil
}

// Missing appends to buf the peers of p that have no link yet. Once none
// is missing, it makes sure the engine polls the devices of p's links and
// remembers that p is complete, so later calls cost one test. Call it
// between Runs, from the goroutine that runs them.
func (e *Engine) Missing(p *Plan, buf []int) []int {
	if p.linked {
		return buf
	}
	n := len(buf)
	for i := range p.peers {
		if e.links[p.peers[i].peer].Load() == nil {
			buf = append(buf, p.peers[i].peer)
		}
	}
	if len(buf) > n {
		return buf
	}
	e.runMu.Lock() // Run reads devs
	for i := range p.peers {
		d := e.links[p.peers[i].peer].Load().dev
		found := false
		for _, x := range e.devs {
			found = found || x == d
		}
		if !found {
			e.devs = append(e.devs, d)
			d.watchEngine(e)
		}
	}
	e.runMu.Unlock()
	p.linked = true
	return buf
}

// Linked reports whether the engine has a link to peer.
func (e *Engine) Linked(peer int) bool {
	return peer >= 0 && peer < len(e.links) && e.links[peer].Load() != nil
}

// Links is the number of peers the engine has a link to.
func (e *Engine) Links() int {
	n := 0
	for i := range e.links {
		if e.links[i].Load() != nil {
			n++
		}
	}
	return n
}

// Done is closed when the engine fails or closes (Err then says why).
func (e *Engine) Done() <-chan struct{} { return e.dead }
