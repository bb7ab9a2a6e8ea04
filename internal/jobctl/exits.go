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
	for i, e := range s.exited {
		if e.Rank == rank {
			s.exited[i].How = how // a restart that ended too
			return true
		}
	}
	s.exited = append(s.exited, Exit{Rank: rank, How: how})
	return true
}

// exits answers a poll on c.
func (s *Server) exits(c net.Conn, nonce string, counter *uint64) error {
	// In the order they ended: a rank whose Init failed because another
	// ended ends after it, and the forming ranks name the first loss
	// they hear of (bootstrap's formLost), the cause, not its victim.
	s.mu.Lock()
	m := exitsMsg{Exited: append([]Exit{}, s.exited...)}
	s.mu.Unlock()
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
