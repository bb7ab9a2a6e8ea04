package trace

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// DefaultEvents is a Recorder's ring size: 16384 events of ~100 bytes
// (1.6 MiB), flushed when half full, so a rank running 100k operations a
// second writes about 12 times a second.
const DefaultEvents = 16384

// FlushEvery is how often the flusher writes what the ring holds even
// when it is not half full, so that a rank that is killed, or exits
// without closing its communicator, leaves all but its last second of
// events in its file: the timeline of a failed job is the one most wanted.
// A quiet rank (nothing new) costs one timer wake-up a second.
const FlushEvery = time.Second

// flushEvery is FlushEvery, which a test may stretch.
var flushEvery = FlushEvery

// Header describes the rank a file belongs to.
type Header struct {
	Rank, Size int
	Host       string
	PID        int
	Restart    int // the process is the rank's Restart-th restart (GORUN_RESTART); 0: its first
	Init       int // the process's Init-th recorder of the rank after its first (SessionPath); 0: its first
}

// Recorder is one rank's timeline. See the package comment.
type Recorder struct {
	path string
	w    io.WriteCloser

	mu      sync.Mutex
	ring    []Event
	head    uint64 // next event to write
	tail    uint64 // next event to flush
	dropped uint64 // dropped since the last flush
	lanes   []string
	comms   []laneComm // communicators of lanes, not yet written
	offset  int64      // launcher clock − this clock, ns
	rtt     int64      // of the sample offset came from; 0: not measured
	closed  bool
	// clock, if set, is asked at each flush for the latest measurement,
	// which is written when it changed (SetClockSource).
	clock func() (offset, rtt int64, ok bool)

	kick chan struct{}
	stop chan struct{}
	done chan struct{}
	werr error // the flusher's first write error (guarded by mu)
}

// Create opens path for writing (truncating it) and returns a Recorder
// writing there. It fails at once when path cannot be written.
func Create(path string, h Header, events int) (*Recorder, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("timeline: %w", err)
	}
	r := New(f, h, events)
	r.path = path
	return r, nil
}

// New returns a Recorder writing to w, with a ring of events events
// (DefaultEvents if ≤ 0). Close closes w.
func New(w io.WriteCloser, h Header, events int) *Recorder {
	if events <= 0 {
		events = DefaultEvents
	}
	events = max(events, 2)
	r := &Recorder{w: w, ring: make([]Event, events), lanes: []string{"comm"},
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go r.flusher(h)
	return r
}

// Lane registers a lane (a row of the timeline: a communicator, a ddp
// bucket, user spans) and returns its number. Lane 0 is "comm", the
// world communicator. Lanes are registered once, not per event.
func (r *Recorder) Lane(name string) uint16 {
	if r == nil {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, n := range r.lanes {
		if n == name {
			return uint16(i)
		}
	}
	if len(r.lanes) >= 1<<16-1 {
		return 0
	}
	r.lanes = append(r.lanes, name)
	return uint16(len(r.lanes) - 1)
}

type laneComm struct {
	lane uint16
	info CommInfo
}

// SetComm says that lane records the communicator info describes; the
// report compares a collective's arrivals among the lanes of one
// communicator. Called once per lane, not per event.
func (r *Recorder) SetComm(lane uint16, info CommInfo) {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.comms = append(r.comms, laneComm{lane, info})
	r.mu.Unlock()
}

// Add records e. It never blocks on I/O: when the ring is full the oldest
// unflushed event is dropped. A failed operation (e.Err) wakes the
// flusher at once: its rank may be about to exit.
func (r *Recorder) Add(e *Event) {
	if r == nil {
		return
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	n := uint64(len(r.ring))
	if r.head-r.tail == n {
		r.tail++
		r.dropped++
	}
	r.ring[r.head%n] = *e
	r.head++
	full := r.head-r.tail >= n/2
	r.mu.Unlock()
	if full || e.Err {
		r.Flush()
	}
}

// Flush asks the flusher to write what has been recorded, without waiting
// for it: a rank about to close, which its launcher may stop before the
// close ends (a peer frozen in its goodbyes), keeps its last events.
func (r *Recorder) Flush() {
	if r == nil {
		return
	}
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// SetClock records this rank's clock offset to the launcher (launcher
// time = this rank's time + offset), measured with round-trip time rtt.
func (r *Recorder) SetClock(offset, rtt int64) {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.offset, r.rtt = offset, rtt
	r.mu.Unlock()
}

// SetClockSource gives the flusher a way to read this rank's latest clock
// offset to the launcher (as SetClock takes it; ok false: none measured
// yet). Each flush that finds a new measurement writes it, so that a rank
// killed before Close, which writes the final one, still has its events
// put on the launcher's clock: without it, its offset is taken as 0, and
// on another host (or in a time namespace) its events land far from the
// others' and the report calls it late. f is called on the flusher's
// goroutine, not under the Recorder's lock.
func (r *Recorder) SetClockSource(f func() (offset, rtt int64, ok bool)) {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.clock = f
	r.mu.Unlock()
}

// Close writes what is left and the clock offset, and closes the file. It
// reports a write error the flusher met.
func (r *Recorder) Close() error {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		<-r.done
		return nil
	}
	r.closed = true
	r.mu.Unlock()
	close(r.stop)
	<-r.done
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.werr != nil && r.path != "" {
		return fmt.Errorf("timeline %s: %w", r.path, r.werr)
	}
	return r.werr
}

// flushBatch bounds the events copied out of the ring under the lock at once.
const flushBatch = 256

// flusher writes the ring to the file; it owns w.
func (r *Recorder) flusher(h Header) {
	defer close(r.done)
	bw := bufio.NewWriterSize(r.w, 64<<10)
	line := appendHeader(make([]byte, 0, 512), h)
	bw.Write(line)
	if err := bw.Flush(); err != nil { // the file is a timeline from the start
		r.setErr(err)
	}
	tick := time.NewTicker(flushEvery)
	defer tick.Stop()
	batch := make([]Event, flushBatch)
	nlanes := 1         // lane 0 is implied
	var synced [2]int64 // the last measurement written (rtt 0: none)
	flush := func() (wrote bool) {
		r.mu.Lock()
		clock := r.clock
		r.mu.Unlock()
		if clock != nil {
			if off, rtt, ok := clock(); ok && rtt > 0 && [2]int64{off, rtt} != synced {
				synced = [2]int64{off, rtt}
				line = appendSync(line[:0], off, rtt)
				bw.Write(line)
				wrote = true
			}
		}
		for {
			r.mu.Lock()
			dropped := r.dropped
			r.dropped = 0
			var newLanes []string
			if len(r.lanes) > nlanes {
				newLanes = append(newLanes, r.lanes[nlanes:]...)
			}
			comms := r.comms
			r.comms = nil
			k := min(r.head-r.tail, uint64(len(batch)))
			n := uint64(len(r.ring))
			for i := uint64(0); i < k; i++ {
				batch[i] = r.ring[(r.tail+i)%n]
			}
			r.tail += k
			r.mu.Unlock()
			for _, name := range newLanes {
				line = appendLane(line[:0], nlanes, name)
				bw.Write(line)
				nlanes++
			}
			for _, c := range comms {
				line = appendComm(line[:0], int(c.lane), c.info)
				bw.Write(line)
			}
			if dropped > 0 {
				line = appendDropped(line[:0], dropped)
				bw.Write(line)
			}
			for i := range batch[:k] {
				line = appendEvent(line[:0], &batch[i])
				bw.Write(line)
			}
			if k == 0 {
				return wrote || dropped > 0 || len(newLanes) > 0 || len(comms) > 0
			}
			wrote = true
		}
	}
	for {
		select {
		case <-r.kick:
		case <-tick.C:
		case <-r.stop:
		}
		select {
		case <-r.stop:
		default:
			// Whole lines reach the file at each flush, but a line may
			// still be cut by a kill during the write: Read skips a
			// last line that does not parse.
			if flush() {
				if err := bw.Flush(); err != nil {
					r.setErr(err)
				}
			}
			continue
		}
		break
	}
	flush()
	r.mu.Lock()
	off, rtt := r.offset, r.rtt
	r.mu.Unlock()
	line = appendClock(line[:0], off, rtt)
	bw.Write(line)
	err := bw.Flush()
	if cerr := r.w.Close(); err == nil {
		err = cerr
	}
	r.setErr(err)
}

func (r *Recorder) setErr(err error) {
	if err == nil {
		return
	}
	r.mu.Lock()
	if r.werr == nil {
		r.werr = err
	}
	r.mu.Unlock()
}
