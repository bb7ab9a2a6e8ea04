package jobctl

// Clock sync: the timeline (internal/trace) needs every rank's clock on
// the launcher's. After connecting, and every clockEvery after, a client
// sends clockSamples pings, each a line {"rank":R,"ping":T0} with T0 its
// own trace.Now(); the server answers each at once with a line
// "MAC {"pong":T0,"t":TS}", TS being its trace.Now() and MAC as the
// client's lines' but over NONCE " pong" and a counter of replies. The
// sample with the smallest round trip T2−T0 gives the offset
// TS − (T0+T2)/2, as NTP's clock filter does: its error is at most half
// that round trip.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"time"

	"github.com/gorun-hpc/gorun/internal/trace"
)

const (
	clockSamples = 8
	clockEvery   = 30 * time.Second
)

type pongMsg struct {
	Pong int64 `json:"pong"`
	T    int64 `json:"t"`
}

// pong answers one ping on c.
func (s *Server) pong(c net.Conn, nonce string, counter *uint64, ping int64) error {
	payload, _ := json.Marshal(pongMsg{Pong: ping, T: trace.Now()})
	line := fmt.Sprintf("%s %s\n", mac(s.token, nonce+" pong", *counter, payload), payload)
	*counter++
	c.SetWriteDeadline(time.Now().Add(ioTimeout))
	_, err := c.Write([]byte(line))
	return err
}

// syncClock measures the offset to the server's clock; it returns false
// when the server does not answer (an older launcher) or the connection
// failed.
func (s *sender) syncClock(rank int, deadline time.Time) (offset, rtt int64, ok bool) {
	s.conn.SetReadDeadline(deadline)
	for range clockSamples {
		t0 := trace.Now()
		if err := s.send(Report{Rank: rank, Ping: t0}, deadline); err != nil {
			return 0, 0, false
		}
		line, err := s.r.ReadBytes('\n')
		t2 := trace.Now()
		if err != nil {
			return 0, 0, false
		}
		sp := bytes.IndexByte(line, ' ')
		if sp < 0 {
			return 0, 0, false
		}
		payload := bytes.TrimSpace(line[sp+1:])
		good := checkMAC(s.token, s.nonce+" pong", s.pongs, payload, string(line[:sp]))
		s.pongs++
		var m pongMsg
		if !good || json.Unmarshal(payload, &m) != nil || m.Pong != t0 {
			return 0, 0, false
		}
		if r := t2 - t0; !ok || r < rtt {
			offset, rtt, ok = m.T-(t0+t2)/2, r, true
		}
	}
	return offset, rtt, ok
}

// ClockOffset is the offset of the launcher's clock to this process's
// (launcher time = trace.Now() + offset) and the round trip it was
// measured with; ok is false until measured (or for a nil client).
func (c *Client) ClockOffset() (offset, rtt time.Duration, ok bool) {
	if c == nil {
		return 0, 0, false
	}
	r := c.clockRTT.Load()
	if r == 0 {
		return 0, 0, false
	}
	return time.Duration(c.clockOffset.Load()), time.Duration(r), true
}
