package jobctl

// Exits before joining: a rank whose process ended before it joined the
// world (Init returned) is known to the launcher alone when gossip never
// saw it; the others would wait for it until their formation timeout.
// The launcher records it on its Server (Exited); a client whose rank is
// forming (WatchExits) polls for such ranks each interval: it sends its
// report with Poll set, and the server answers at once, after updating
// the rank's state as for any report, with one line
// "MAC {"exited":[{"rank":R,"how":"exit status 1"},...]}", MAC as a pong's
// (clock.go): over NONCE " pong" and the counter of replies. A server
// that does not answer (an older launcher) is not asked again.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"sort"
	"time"
)

// Exit is a rank whose process ended before it joined the world.
type Exit struct {
	Rank int    `json:"rank"`
	How  string `json:"how"` // "exit status 1", "signal: killed", ...
}

type exitsMsg struct {
	Exited []Exit `json:"exited"`
}

// Exited records that rank's process ended (how says how) and tells the
// ranks that poll, if the rank never reported that it joined the world;
// it reports whether it did. The launcher calls it for every rank's exit.
func (s *Server) Exited(rank int, how string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.ranks[rank]; r != nil && r.Joined {
		return false
	}
	if s.exited == nil {
		s.exited = make(map[int]string)
	}
	s.exited[rank] = how
	return true
}

// exits answers a poll on c.
func (s *Server) exits(c net.Conn, nonce string, counter *uint64) error {
	s.mu.Lock()
	m := exitsMsg{Exited: []Exit{}}
	for r, how := range s.exited {
		m.Exited = append(m.Exited, Exit{Rank: r, How: how})
	}
	s.mu.Unlock()
	sort.Slice(m.Exited, func(i, j int) bool { return m.Exited[i].Rank < m.Exited[j].Rank })
	payload, _ := json.Marshal(m)
	line := fmt.Sprintf("%s %s\n", mac(s.token, nonce+" pong", *counter, payload), payload)
	*counter++
	c.SetWriteDeadline(time.Now().Add(ioTimeout))
	_, err := c.Write([]byte(line))
	return err
}

// poll sends rep with Poll set and reads the server's answer; ok is false
// when the server did not answer as it should.
func (s *sender) poll(rep Report, deadline time.Time) (exits []Exit, ok bool) {
	rep.Poll = true
	if err := s.send(rep, deadline); err != nil {
		return nil, false
	}
	s.conn.SetReadDeadline(deadline)
	line, err := s.r.ReadBytes('\n')
	if err != nil {
		return nil, false
	}
	sp := bytes.IndexByte(line, ' ')
	if sp < 0 {
		return nil, false
	}
	payload := bytes.TrimSpace(line[sp+1:])
	good := checkMAC(s.token, s.nonce+" pong", s.pongs, payload, string(line[:sp]))
	s.pongs++
	var m exitsMsg
	if !good || json.Unmarshal(payload, &m) != nil || m.Exited == nil {
		return nil, false
	}
	return m.Exited, true
}

// WatchExits calls on, from the client's goroutine, for each rank the
// launcher says ended before it joined the world, once per rank, until
// stop is called; on must not block. One watcher at a time; a nil client
// never calls on.
func (c *Client) WatchExits(on func(Exit)) (stop func()) {
	if c == nil {
		return func() {}
	}
	c.watch.Store(&on)
	c.poke()
	return func() { c.watch.Store(nil) }
}
