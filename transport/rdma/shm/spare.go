//go:build linux

package shm

import (
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Spare segments: a connection's own segment (1.4 MiB: receive entries,
// key table, ring) is created, populated and read once (populate) so that
// the ring's first lap runs from cache; that costs about 2 ms of CPU per
// connection, in the handshake. Connections made at once by a recovery
// (Shrink, Grow: two or three per rank, all ranks at the same moment) paid
// it on the recovery's critical path, and on a loaded host, where the
// ranks get a small share of a CPU, it was most of a link's 100-200 ms.
// So a device keeps up to spareSegments made in advance: newConn takes one
// if there is one, and the device makes the next ones spareRefillDelay
// after the last take, off the critical path of the connections made then
// and of the operations that follow them. A device makes none before its
// first connection, so a process that connects once pays nothing more.

const (
	// spareSegments is how many segments a device keeps made: the links
	// of a rank of a small shrunk or grown world (2-3) take them all.
	spareSegments = 2
	// spareRefillDelay is how long after a take the device makes the
	// next spares: the connections of a recovery come together, and the
	// first operations after them should not compete with the refill.
	spareRefillDelay = 500 * time.Millisecond
)

// spares is a device's pool of made segments. mu guards the fields.
type spares struct {
	mu     sync.Mutex
	segs   []spareSeg
	timer  *time.Timer // the pending refill, nil if none
	closed bool
	wg     sync.WaitGroup // a running refill
}

type spareSeg struct {
	seg *segment
	fd  int
}

// take returns a made segment and its memfd, or ok false, and schedules
// the refill.
func (s *spares) take(depth int) (seg *segment, fd int, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, -1, false
	}
	if n := len(s.segs); n > 0 {
		seg, fd, ok = s.segs[n-1].seg, s.segs[n-1].fd, true
		s.segs = s.segs[:n-1]
	}
	switch {
	case s.timer != nil && s.timer.Stop():
		s.timer.Reset(spareRefillDelay) // later: more connections may follow
	case s.timer != nil:
		// The refill runs: it fills the pool up, this take included.
	default:
		s.wg.Add(1) // done by the refill, or by close if it stops the timer first
		s.timer = time.AfterFunc(spareRefillDelay, func() { s.refill(depth) })
	}
	return seg, fd, ok
}

// refill is the timer's: it fills the pool.
func (s *spares) refill(depth int) {
	defer s.wg.Done()
	s.fill(depth)
	s.mu.Lock()
	s.timer = nil
	s.mu.Unlock()
}

// fill makes segments until the pool holds spareSegments, the device
// closes, or making one fails.
func (s *spares) fill(depth int) {
	for {
		s.mu.Lock()
		full := s.closed || len(s.segs) >= spareSegments
		s.mu.Unlock()
		if full {
			return
		}
		seg, fd, err := newSegment(depth)
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			unix.Close(fd)
			seg.unmap()
			return
		}
		s.segs = append(s.segs, spareSeg{seg, fd})
		s.mu.Unlock()
	}
}

// close stops the refill and frees the spares.
func (s *spares) close() {
	s.mu.Lock()
	s.closed = true
	if s.timer != nil && s.timer.Stop() {
		s.timer = nil
		s.wg.Done() // the refill will not run
	}
	segs := s.segs
	s.segs = nil
	s.mu.Unlock()
	s.wg.Wait()
	for _, sp := range segs {
		unix.Close(sp.fd)
		sp.seg.unmap()
	}
}
