package jobctl

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"sort"
	"strconv"
	"sync"
	"time"
)

// idleTimeout ends a connection that sent nothing for this long; clients
// send a heartbeat every few seconds.
const idleTimeout = 30 * time.Second

// RankState is what the server knows about one rank.
type RankState struct {
	Rank      int
	Joined    bool
	Phase     string
	Op        string
	Seq       uint64
	InOp      bool
	Since     time.Time // when the rank entered (or left) its current op, server clock
	LastSeen  time.Time // last report received
	Connected bool      // a connection from this rank is open
	Done      bool      // the rank closed its client
	// Blamed: the rank's communicator failed because of rank Cause
	// (Client.Blame); the launcher names Cause, not this rank.
	Blamed bool
	Cause  int
	// MetricsAddr is where the rank serves its metrics, or "".
	MetricsAddr string
}

// Snapshot is a consistent copy of the server's view of the job.
type Snapshot struct {
	Ranks        []RankState // ordered by rank; only ranks that reported
	LastProgress time.Time   // last change of any rank's phase, op or seq
	AuthFailures int         // connections dropped for a bad MAC
}

// Server accepts rank connections and keeps the latest state of each rank.
type Server struct {
	ln    net.Listener
	token []byte

	mu       sync.Mutex
	ranks    map[int]*RankState
	progress time.Time
	authFail int
	conns    map[net.Conn]struct{}
	closed   bool
	changed  chan struct{} // closed and replaced on every state change
	exited   []Exit        // ranks that ended before they joined, in the order they ended (exits.go)

	wg sync.WaitGroup
}

// Listen starts a server on addr ("127.0.0.1:0", ":0", ...) that accepts
// reports authenticated with token. The server runs until Close.
func Listen(ctx context.Context, addr string, token []byte) (*Server, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, &OpError{Op: "listen", Peer: addr, Rank: -1, Err: err}
	}
	s := &Server{
		ln:       ln,
		token:    append([]byte(nil), token...),
		ranks:    make(map[int]*RankState),
		progress: time.Now(),
		conns:    make(map[net.Conn]struct{}),
		changed:  make(chan struct{}),
	}
	s.wg.Add(1)
	go s.acceptLoop()
	return s, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Changed returns a channel that is closed at the next state change.
func (s *Server) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

// Snapshot returns a copy of the current state.
func (s *Server) Snapshot() Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	snap := Snapshot{LastProgress: s.progress, AuthFailures: s.authFail}
	for _, r := range s.ranks {
		snap.Ranks = append(snap.Ranks, *r)
	}
	sort.Slice(snap.Ranks, func(i, j int) bool { return snap.Ranks[i].Rank < snap.Ranks[j].Rank })
	return snap
}

// Close stops the server and ends every connection.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	err := s.ln.Close()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return err
}

func (s *Server) acceptLoop() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				continue
			}
			return // closed
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serve(c)
	}
}

// serve reads one rank's reports until the connection ends.
func (s *Server) serve(c net.Conn) {
	defer s.wg.Done()
	rank := -1
	defer func() {
		c.Close()
		s.mu.Lock()
		delete(s.conns, c)
		if r := s.ranks[rank]; r != nil {
			r.Connected = false
			s.notifyLocked()
		}
		s.mu.Unlock()
	}()
	var nb [16]byte
	if _, err := rand.Read(nb[:]); err != nil {
		return
	}
	nonce := hex.EncodeToString(nb[:])
	c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprintf(c, "%s %s\n", greeting, nonce); err != nil {
		return
	}
	sc := bufio.NewScanner(c)
	sc.Buffer(make([]byte, 0, 512), maxLine)
	var pongs uint64 // replies sent
	for counter := uint64(0); ; counter++ {
		c.SetReadDeadline(time.Now().Add(idleTimeout))
		if !sc.Scan() {
			return
		}
		line := sc.Bytes()
		sp := bytes.IndexByte(line, ' ')
		if sp < 0 || !checkMAC(s.token, nonce, counter, line[sp+1:], string(line[:sp])) {
			s.mu.Lock()
			s.authFail++
			s.notifyLocked()
			s.mu.Unlock()
			return
		}
		var rep Report
		if err := json.Unmarshal(line[sp+1:], &rep); err != nil || rep.Rank < 0 {
			return
		}
		if rank >= 0 && rep.Rank != rank {
			return // one connection speaks for one rank
		}
		rank = rep.Rank
		if rep.Ping != 0 {
			if err := s.pong(c, nonce, &pongs, rep.Ping); err != nil {
				return
			}
			continue
		}
		s.update(rep, time.Now(), c.RemoteAddr())
		if rep.Poll {
			if err := s.exits(c, nonce, &pongs); err != nil {
				return
			}
		}
	}
}

// update merges one report into the state.
func (s *Server) update(rep Report, now time.Time, from net.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.ranks[rep.Rank]
	if r == nil {
		r = &RankState{Rank: rep.Rank}
		s.ranks[rep.Rank] = r
	}
	since := now.Add(-time.Duration(rep.SinceMS) * time.Millisecond)
	progressed := !r.Connected && r.LastSeen.IsZero() ||
		r.Joined != rep.Joined || r.Phase != rep.Phase || r.Op != rep.Op ||
		r.Seq != rep.Seq || r.InOp != rep.InOp || r.Done != rep.Done
	if progressed || r.Since.IsZero() {
		r.Since = since
	}
	r.Joined, r.Phase, r.Op, r.Seq, r.InOp, r.Done = rep.Joined, rep.Phase, rep.Op, rep.Seq, rep.InOp, rep.Done
	r.LastSeen = now
	if ta, ok := from.(*net.TCPAddr); ok && rep.MetricsPort > 0 {
		r.MetricsAddr = net.JoinHostPort(ta.IP.String(), strconv.Itoa(rep.MetricsPort))
	}
	blame := rep.Blamed && (!r.Blamed || r.Cause != rep.Cause)
	if blame {
		r.Blamed, r.Cause = true, rep.Cause
	}
	changed := progressed || !r.Connected || blame
	r.Connected = true
	if progressed {
		s.progress = now
	}
	if changed {
		s.notifyLocked()
	}
}

func (s *Server) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}
