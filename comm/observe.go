package comm

// Observability: the timeline (GORUN_TIMELINE, internal/trace) and its
// user-facing spans. Off, a communicator's obs is nil and an operation
// pays one nil check; on, it pays two clock reads, a few per message in
// the engine (engine.OpStats) and one locked copy into the ring.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/gorun-hpc/gorun/collectives"
	"github.com/gorun-hpc/gorun/internal/engine"
	"github.com/gorun-hpc/gorun/internal/jobenv"
	"github.com/gorun-hpc/gorun/internal/trace"
)

// observer is one process's recorder, shared by the communicators made
// from the one that opened it (Split, Shrink). That one closes it.
type observer struct {
	rec *trace.Recorder // nil: no timeline
	met *metrics        // nil: no metrics (metrics.go)

	mu    sync.Mutex
	comms int // communicators attached so far
	// clock reports this rank's offset to the launcher's clock (Init sets
	// it to the job-control client's measurement).
	clock func() (offset, rtt time.Duration, ok bool)
}

// newObserver opens cfg's timeline for rank and its metrics endpoint, or
// returns nil when there is neither. An unwritable path or a port in use
// fails here, before the job starts.
func newObserver(cfg *config, rank, size int) (*observer, error) {
	if cfg.timeline == "" && cfg.metricsAddr == "" {
		return nil, nil
	}
	if !observable {
		return nil, errors.New("gorun: this build (-tags gorun_noobs) has no timeline or metrics")
	}
	o := &observer{}
	if cfg.metricsAddr != "" {
		slot := cfg.localRank
		if slot < 0 {
			slot = rank
		}
		var err error
		if o.met, err = listenMetrics(cfg.metricsAddr, slot); err != nil {
			return nil, err
		}
	}
	if cfg.timeline != "" {
		host, _ := os.Hostname()
		// A rank restarted by gorun --max-restarts writes FILE.RANK.restartN:
		// its first incarnation's file stays for the merge.
		restart := restartNumber()
		path := trace.RestartPath(cfg.timeline, rank, restart)
		rec, err := createSession(path, trace.Header{Rank: rank, Size: size, Host: host, PID: os.Getpid(), Restart: restart})
		if err != nil {
			if o.met != nil {
				o.met.close()
			}
			return nil, fmt.Errorf("gorun: GORUN_TIMELINE=%s: %w", cfg.timeline, err)
		}
		o.rec = rec
		rec.SetClockSource(o.clockOffset) // for a rank killed before close writes it
	}
	return o, nil
}

// sessions counts the recorders this process opened for each rank's file
// (RestartPath, absolute): a later first communicator of the rank in this
// process (Init after Close, NewLocal again, open together or not) writes
// the N-th to FILE.RANK.initN (trace.SessionPath), which the merge folds
// into the rank's. Before 2026-12-01 it truncated FILE.RANK and the first
// one's events were lost.
var sessions struct {
	sync.Mutex
	n map[string]int
}

// createSession opens the recorder of this process's next session of
// path.
func createSession(path string, h trace.Header) (*trace.Recorder, error) {
	key, err := filepath.Abs(path)
	if err != nil {
		key = path
	}
	sessions.Lock()
	defer sessions.Unlock()
	h.Init = sessions.n[key]
	rec, err := trace.Create(trace.SessionPath(path, h.Init), h, 0)
	if err == nil {
		if sessions.n == nil {
			sessions.n = map[string]int{}
		}
		sessions.n[key]++
	}
	return rec, err
}

// restartNumber is GORUN_RESTART's n (this process is its rank's n-th
// restart), 0 when unset or not a positive number.
func restartNumber() int {
	n, _ := jobenv.Int(osGetenv, jobenv.Restart, 0) // 0 on an error
	return n
}

// clockOffset is the clock's latest measurement, once Init has set it.
func (o *observer) clockOffset() (offset, rtt int64, ok bool) {
	o.mu.Lock()
	clock := o.clock
	o.mu.Unlock()
	if clock == nil {
		return 0, 0, false
	}
	off, d, ok := clock()
	return int64(off), int64(d), ok
}

// close writes the clock offset, closes the file and stops the metrics.
func (o *observer) close() {
	if o.met != nil {
		o.met.close()
	}
	if o.rec == nil {
		return
	}
	if off, rtt, ok := o.clockOffset(); ok {
		o.rec.SetClock(off, rtt)
	}
	if err := o.rec.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "gorun: %v\n", err)
	}
}

// reconnected counts n connections made after the first world formed.
func (co *commObs) reconnected(n int) {
	if co != nil && co.o.met != nil {
		co.o.met.reconnects.Add(uint64(n))
	}
}

// attach gives a new communicator its lane: "comm" for the first, then
// "comm 1", "comm 2", ... in creation order.
func (o *observer) attach() *commObs {
	o.mu.Lock()
	n := o.comms
	o.comms++
	o.mu.Unlock()
	name := "comm"
	if n > 0 {
		name = fmt.Sprintf("comm %d", n)
	}
	return &commObs{o: o, lane: o.rec.Lane(name), name: name}
}

// flush has the timeline's flusher write the events recorded so far.
func (co *commObs) flush() {
	if co != nil {
		co.o.rec.Flush()
	}
}

// commObs is one communicator's part; used under the communicator's turn.
type commObs struct {
	o     *observer
	lane  uint16
	name  string // the lane's
	stats engine.OpStats
	ev    trace.Event
	// described: the lane's communicator is on the timeline (describe).
	described bool
}

// describe records which communicator co's lane is, at its first
// operation, when its ranks' endpoints are known: this rank, the size and
// an ID every member computes alike, so that the report compares a
// collective's arrivals among the communicator's own members.
func (co *commObs) describe(c *Comm) {
	co.described = true
	co.o.rec.SetComm(co.lane, trace.CommInfo{Rank: c.rank, Size: c.size, ID: commID(c)})
}

// commID hashes what every member of c holds alike: the world it was
// made in and, in rank order, each rank's process (host, pid, start
// time) and addresses.
func commID(c *Comm) uint64 {
	h := fnv.New64a()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(c.size))
	h.Write(b[:])
	if c.conn == nil {
		return h.Sum64()
	}
	binary.LittleEndian.PutUint64(b[:], uint64(c.conn.world))
	h.Write(b[:])
	for _, ep := range c.conn.eps {
		h.Write(ep.host[:])
		binary.LittleEndian.PutUint64(b[:], uint64(ep.pid))
		h.Write(b[:])
		binary.LittleEndian.PutUint64(b[:], ep.start)
		h.Write(b[:])
		names := make([]string, 0, len(ep.addrs))
		for name := range ep.addrs {
			names = append(names, name)
		}
		slices.Sort(names)
		for _, name := range names {
			h.Write([]byte(name))
			h.Write([]byte{0})
			h.Write([]byte(ep.addrs[name]))
			h.Write([]byte{0})
		}
	}
	return h.Sum64()
}

// run runs c's current call as exec would, recording it.
func (co *commObs) run(ctx context.Context, c *Comm, p *engine.Plan, algo collectives.Algo, s *spec) error {
	c.call.Stats = &co.stats
	start := trace.Now()
	err := c.eng.Run(ctx, p, &c.call, c.cfg.timeout)
	end := trace.Now()
	name := c.call.Coll.String()
	if c.call.Coll == collectives.SendRecv {
		name = "recv"
		if s.send {
			name = "send"
		} else if s.group {
			name = "sendrecv"
		}
	}
	if m := co.o.met; m != nil {
		m.op(c.call.Coll, algo, max(len(s.work), len(s.input)), end-start)
	}
	if co.o.rec == nil {
		return err
	}
	if !co.described {
		co.describe(c)
	}
	co.ev = trace.Event{Kind: trace.KindOp, Lane: co.lane, Seq: c.call.Seq, Name: name, Algo: algo.String(),
		Bytes: int64(max(len(s.work), len(s.input))), Arg: int64(s.peer), Start: start, End: end,
		Wait: co.stats.FirstMsg, Reduce: co.stats.Reduce, Err: err != nil}
	co.o.rec.Add(&co.ev)
	return err
}

// Tracing reports whether c records a timeline (GORUN_TIMELINE or
// WithTimeline), so a caller can skip preparing what it would record.
// A nil *Comm records nothing.
func (c *Comm) Tracing() bool { return c != nil && c.obs != nil && c.obs.o.rec != nil }

// TraceLane is the name of the communicator's row on the timeline:
// "comm" for the first, "comm 1", "comm 2", ... for those made from it (in
// the order they were made), "" when the timeline is off. A library that
// records spans of its own per communicator (ddp's buckets) names its rows
// after it, so that two communicators' spans do not share a row.
func (c *Comm) TraceLane() string {
	if !c.Tracing() {
		return ""
	}
	return c.obs.name
}

// Span is a stretch of work on the timeline, begun by StartSpan.
type Span struct {
	rec   *trace.Recorder
	lane  uint16
	name  string
	arg   int64
	start int64
}

// StartSpan begins a span named name (with a number shown beside it) on
// the timeline's row lane, such as "compute"; End records it. Spans on one
// row should nest. When the timeline is off it records nothing and costs
// a nil check.
func (c *Comm) StartSpan(lane, name string, arg int64) Span {
	if !c.Tracing() {
		return Span{}
	}
	rec := c.obs.o.rec
	return Span{rec: rec, lane: rec.Lane(lane), name: name, arg: arg, start: trace.Now()}
}

// End records the span.
func (s Span) End() {
	if s.rec == nil {
		return
	}
	s.rec.Add(&trace.Event{Kind: trace.KindSpan, Lane: s.lane, Name: s.name, Arg: s.arg, Start: s.start, End: trace.Now()})
}

// TraceInstant records a point in time named name on the row lane.
func (c *Comm) TraceInstant(lane, name string, arg int64) {
	if !c.Tracing() {
		return
	}
	rec := c.obs.o.rec
	now := trace.Now()
	rec.Add(&trace.Event{Kind: trace.KindInstant, Lane: rec.Lane(lane), Name: name, Arg: arg, Start: now, End: now})
}

// WithTimeline records every operation of the communicator (and of those
// made from it) to path.RANK, as GORUN_TIMELINE does (path.RANK.restartN
// in a process gorun restarted, GORUN_RESTART=N; path.RANK.initN for the
// N-th first communicator of the rank that this process makes after the
// first, which leaves the earlier ones' files); "" turns it off.
func WithTimeline(path string) Option {
	return func(c *config) error { c.timeline = path; return nil }
}

// TraceNow reads the timeline's clock (nanoseconds), for a span begun
// outside Go: the C ABI's gorun_trace_now, read by the torch backend when
// a call starts.
func TraceNow() int64 { return trace.Now() }

// TraceSpanSince records a span named name on the row lane from start (a
// TraceNow reading) to now, as StartSpan and End would. With the timeline
// off it records nothing.
func (c *Comm) TraceSpanSince(lane, name string, arg, start int64) {
	if !c.Tracing() {
		return
	}
	rec := c.obs.o.rec
	rec.Add(&trace.Event{Kind: trace.KindSpan, Lane: rec.Lane(lane), Name: name, Arg: arg, Start: start, End: trace.Now()})
}
