package jobctl

import (
	"bufio"
	"fmt"
	"net"
	"testing"
	"time"
)

// In one process both ends read the same clock: the measured offset is
// within half the round trip of zero.
func TestClockOffset(t *testing.T) {
	s := listen(t, "secret")
	c := newClient(s.Addr().String(), []byte("secret"), 2, 10*time.Millisecond)
	defer c.Close()
	c.Phase(2, "bootstrap")
	waitFor(t, s, "the rank", func(sn Snapshot) bool { return len(sn.Ranks) == 1 })
	var off, rtt time.Duration
	for ok := false; !ok; {
		if off, rtt, ok = c.ClockOffset(); !ok {
			time.Sleep(time.Millisecond) // polling a value the loop sets once; the test's deadline bounds it
		}
	}
	if rtt <= 0 || off > rtt/2+time.Microsecond || off < -rtt/2-time.Microsecond {
		t.Errorf("offset %v with round trip %v: want |offset| ≤ rtt/2", off, rtt)
	}
	// Pings change no state.
	if sn := s.Snapshot(); sn.Ranks[0].Phase != "bootstrap" || sn.Ranks[0].Rank != 2 {
		t.Errorf("state after the clock sync: %+v", sn.Ranks[0])
	}
	var nilc *Client
	if _, _, ok := nilc.ClockOffset(); ok {
		t.Error("a nil client has an offset")
	}
}

// A server that never answers pings (an older launcher) leaves the offset
// unmeasured and the reports flowing.
func TestClockOffsetUnanswered(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	lines := make(chan string, 100)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		fmt.Fprintf(conn, "%s nonce\n", greeting)
		sc := bufio.NewScanner(conn)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	c := newClient(ln.Addr().String(), []byte("secret"), 1, 10*time.Millisecond)
	defer c.Close()
	c.Phase(1, "bootstrap")
	// The ping, then (after the read deadline) a fresh connection or the
	// report: either way the client goes on without an offset.
	select {
	case <-lines:
	case <-time.After(10 * time.Second):
		t.Fatal("no line from the client")
	}
	if _, _, ok := c.ClockOffset(); ok {
		t.Error("an offset from a server that never answered")
	}
}
