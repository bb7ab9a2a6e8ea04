package jobctl

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorun-hpc/gorun/internal/jobenv"
	"github.com/gorun-hpc/gorun/internal/release"
)

// Environment variables the client reads.
const (
	EnvControl = jobenv.Control  // host:port of the launcher's server
	EnvToken   = jobenv.JobToken // shared secret of the job
	EnvRank    = jobenv.Rank
)

const (
	// defaultInterval is how often the client sends its latest state: often
	// enough for a live view, rare enough to cost nothing.
	defaultInterval = time.Second
	// heartbeat resends an unchanged state so the server knows the rank lives.
	heartbeat = 5 * time.Second
	// ioTimeout bounds every dial, read and write; the channel is best effort.
	ioTimeout = 2 * time.Second
	// closeFlush bounds the final report sent by Close.
	closeFlush = 500 * time.Millisecond
)

// Client reports one rank's progress to the launcher. Its methods never
// block and never fail; a nil *Client does nothing.
type Client struct {
	addr     string
	token    []byte
	interval time.Duration

	rank    atomic.Int64
	joined  atomic.Bool
	phase   atomic.Pointer[string]
	state   atomic.Uint64              // opID<<48 | inOp<<47 | seq (47 bits)
	lastOps [4]atomic.Pointer[opEntry] // the ops entered last
	nextOp  atomic.Uint32              // where the next one goes

	clockOffset, clockRTT atomic.Int64 // clock.go; rtt 0: not measured
	cause                 atomic.Int64 // Blame's rank + 1; 0: none
	metricsPort           atomic.Int64
	watch                 atomic.Pointer[func(Exit)] // WatchExits's (exits.go)

	// Owned by the loop goroutine.
	seen   uint64    // state word at the last report
	seenAt time.Time // when the loop first saw it

	wake   chan struct{}
	stop   chan struct{}
	done   chan struct{}
	closed sync.Once
}

const (
	seqMask = 1<<47 - 1
	inBit   = 1 << 47
)

// FromEnv returns a client for the launcher named by GORUN_CONTROL, or nil
// (a valid no-op client) when the variable is absent or invalid.
func FromEnv() *Client {
	addr := os.Getenv(EnvControl)
	if addr == "" {
		return nil
	}
	rank, err := strconv.Atoi(os.Getenv(EnvRank))
	if err != nil {
		rank = -1
	}
	return New(addr, []byte(os.Getenv(EnvToken)), rank)
}

// New returns a client that reports to the server at addr; rank may be -1
// until Joined or Phase names it. The client dials in the background.
func New(addr string, token []byte, rank int) *Client {
	return newClient(addr, token, rank, defaultInterval)
}

func newClient(addr string, token []byte, rank int, interval time.Duration) *Client {
	c := &Client{
		addr:     addr,
		token:    append([]byte(nil), token...),
		interval: interval,
		wake:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	c.rank.Store(int64(rank))
	c.seenAt = time.Now()
	go c.loop()
	return c
}

// Joined records that rank has joined the world.
func (c *Client) Joined(rank int) {
	if c == nil {
		return
	}
	c.rank.Store(int64(rank))
	c.joined.Store(true)
	c.poke()
}

// Phase records rank's start-up phase ("bootstrap", "connecting", "ready").
func (c *Client) Phase(rank int, phase string) {
	if c == nil {
		return
	}
	c.rank.Store(int64(rank))
	c.phase.Store(&phase)
	c.poke()
}

// SetMetricsPort tells the launcher where this rank serves its metrics.
func (c *Client) SetMetricsPort(port int) {
	if c == nil {
		return
	}
	c.metricsPort.Store(int64(port))
	c.poke()
}

// Blame records that this rank's communicator failed because of rank
// cause (a peer that failed, closed or aborted), and sends it at once: if
// this rank then exits with an error, gorun names cause as the rank that
// failed. The first call counts.
func (c *Client) Blame(cause int) {
	if c == nil || cause < 0 {
		return
	}
	if c.cause.CompareAndSwap(0, int64(cause)+1) {
		c.poke()
	}
}

// Enter records that the rank entered collective op number seq.
func (c *Client) Enter(op string, seq uint64) {
	if c == nil {
		return
	}
	// Collectives repeat, or alternate among a few: skip the table lookup.
	var e *opEntry
	for i := range c.lastOps {
		if x := c.lastOps[i].Load(); x != nil && x.name == op {
			e = x
			break
		}
	}
	if e == nil {
		e = internOp(op)
		i := c.nextOp.Add(1) % uint32(len(c.lastOps))
		c.lastOps[i].Store(e)
	}
	// A release store, not atomic's Store (a locked exchange): the loop
	// only reads the word, and a collective pays for this twice.
	release.Store64(&c.state, uint64(e.id)<<48|inBit|seq&seqMask)
}

// Leave records that the rank left its current collective.
func (c *Client) Leave() {
	if c == nil {
		return
	}
	// A load and a release store, not a locked And: only Enter and Leave
	// write the word, around a collective. (Where two communicators of a
	// process run at once, the word shows one of them, as it did.)
	release.Store64(&c.state, c.state.Load()&^inBit)
}

// Close sends a last report (waiting at most half a second) and stops the
// background goroutine.
func (c *Client) Close() error {
	if c == nil {
		return nil
	}
	c.closed.Do(func() { close(c.stop) })
	<-c.done
	return nil
}

func (c *Client) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// report reads the current state. The loop notes when it first saw the
// state word change (Enter and Leave stay free of clock reads), so SinceMS
// is late by up to one interval.
func (c *Client) report(done bool) Report {
	st := c.state.Load()
	now := time.Now()
	if st != c.seen {
		c.seen, c.seenAt = st, now
	}
	r := Report{
		Rank:    int(c.rank.Load()),
		Joined:  c.joined.Load(),
		Op:      opName(uint16(st >> 48)),
		Seq:     st & seqMask,
		InOp:    st&inBit != 0,
		SinceMS: now.Sub(c.seenAt).Milliseconds(),
		Done:    done,

		MetricsPort: int(c.metricsPort.Load()),
	}
	if v := c.cause.Load(); v > 0 {
		r.Blamed, r.Cause = true, int(v-1)
	}
	if p := c.phase.Load(); p != nil {
		r.Phase = *p
	}
	return r
}

// loop sends the latest state about once per interval, reconnecting with
// back-off while the server is unreachable.
func (c *Client) loop() {
	defer close(c.done)
	t := time.NewTicker(c.interval)
	defer t.Stop()
	var (
		s        *sender
		last     Report
		lastSent time.Time
		retryAt  time.Time
		synced   time.Time // last clock sync
		backoff  = c.interval
		noPoll   bool             // the server did not answer a poll (exits.go)
		told     = map[int]bool{} // ranks passed to the watcher
	)
	defer func() {
		if s != nil {
			s.conn.Close()
		}
	}()
	send := func(rep Report, deadline time.Time) {
		if rep.Rank < 0 {
			return
		}
		if s == nil {
			if time.Now().Before(retryAt) {
				return
			}
			var err error
			s, err = dial(c.addr, c.token, deadline)
			if err != nil {
				retryAt = time.Now().Add(backoff)
				backoff = min(2*backoff, 10*time.Second)
				return
			}
			backoff = c.interval
		}
		if time.Since(synced) >= clockEvery && !s.noClock {
			synced = time.Now()
			if off, rtt, ok := s.syncClock(rep.Rank, deadline); ok {
				c.clockOffset.Store(off)
				c.clockRTT.Store(max(rtt, 1))
			} else {
				s.noClock = true
			}
		}
		if on := c.watch.Load(); on != nil && !noPoll && !rep.Done {
			exits, ok := s.poll(rep, deadline)
			if !ok {
				// No answer: an older server, or a broken connection.
				s.conn.Close()
				s, noPoll = nil, true
				return
			}
			for _, e := range exits {
				if !told[e.Rank] {
					told[e.Rank] = true
					(*on)(e)
				}
			}
		} else if err := s.send(rep, deadline); err != nil {
			s.conn.Close()
			s = nil
			return
		}
		last, lastSent = rep, time.Now()
	}
	for {
		select {
		case <-c.stop:
			retryAt = time.Time{}
			send(c.report(true), time.Now().Add(closeFlush))
			return
		case <-c.wake:
		case <-t.C:
		}
		rep := c.report(false)
		cmp := rep
		cmp.SinceMS = last.SinceMS
		if cmp != last || time.Since(lastSent) >= heartbeat || c.watch.Load() != nil && !noPoll {
			send(rep, time.Now().Add(ioTimeout))
		}
	}
}

// sender is one authenticated connection.
type sender struct {
	conn    net.Conn
	r       *bufio.Reader
	token   []byte
	nonce   string
	counter uint64
	buf     []byte
	pongs   uint64 // replies read (clock.go)
	noClock bool   // the server did not answer a ping
}

func dial(addr string, token []byte, deadline time.Time) (*sender, error) {
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, &OpError{Op: "dial", Peer: addr, Rank: -1, Err: err}
	}
	conn.SetReadDeadline(deadline)
	r := bufio.NewReaderSize(conn, 256)
	line, err := r.ReadString('\n')
	if err != nil {
		conn.Close()
		return nil, &OpError{Op: "greeting", Peer: addr, Rank: -1, Err: err}
	}
	nonce, ok := strings.CutPrefix(strings.TrimSpace(line), greeting+" ")
	if !ok || nonce == "" {
		conn.Close()
		return nil, &OpError{Op: "greeting", Peer: addr, Rank: -1, Err: ErrProtocol}
	}
	return &sender{conn: conn, r: r, token: token, nonce: nonce}, nil
}

func (s *sender) send(rep Report, deadline time.Time) error {
	payload, err := json.Marshal(rep)
	if err != nil {
		return err
	}
	s.buf = fmt.Appendf(s.buf[:0], "%s %s\n", mac(s.token, s.nonce, s.counter, payload), payload)
	s.counter++
	s.conn.SetWriteDeadline(deadline)
	_, err = s.conn.Write(s.buf)
	return err
}

// The op table interns op names so Enter stores one word and allocates
// nothing for names it has seen. Entries live forever; a job has a handful.
type opTable struct {
	ids   map[string]*opEntry
	names []string
}

type opEntry struct {
	name string
	id   uint16
}

var (
	ops   atomic.Pointer[opTable]
	opsMu sync.Mutex
)

func init() {
	ops.Store(&opTable{ids: map[string]*opEntry{"": {"", 0}}, names: []string{""}})
}

func internOp(op string) *opEntry {
	if e, ok := ops.Load().ids[op]; ok {
		return e
	}
	opsMu.Lock()
	defer opsMu.Unlock()
	t := ops.Load()
	if e, ok := t.ids[op]; ok {
		return e
	}
	if len(t.names) >= 1<<16-1 {
		return t.ids[""]
	}
	n := &opTable{ids: make(map[string]*opEntry, len(t.ids)+1), names: append(t.names[:len(t.names):len(t.names)], op)}
	for k, v := range t.ids {
		n.ids[k] = v
	}
	e := &opEntry{name: op, id: uint16(len(n.names) - 1)}
	n.ids[op] = e
	ops.Store(n)
	return e
}

func opName(id uint16) string {
	t := ops.Load()
	if int(id) < len(t.names) {
		return t.names[id]
	}
	return ""
}
