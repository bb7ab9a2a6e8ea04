package bootstrap

import (
	"log"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// logLines is a Logger's output, with a channel that says a line came.
type logLines struct {
	mu    sync.Mutex
	lines []string
	added chan struct{} // capacity 1
}

func (l *logLines) Write(b []byte) (int, error) {
	l.mu.Lock()
	l.lines = append(l.lines, string(b))
	l.mu.Unlock()
	select {
	case l.added <- struct{}{}:
	default:
	}
	return len(b), nil
}

// waitFor waits until a line holds s, or fails t after within.
func (l *logLines) waitFor(t *testing.T, s string, within time.Duration) {
	t.Helper()
	deadline := time.After(within)
	for {
		l.mu.Lock()
		for _, line := range l.lines {
			if strings.Contains(line, s) {
				l.mu.Unlock()
				return
			}
		}
		l.mu.Unlock()
		select {
		case <-l.added:
		case <-deadline:
			t.Fatalf("no log line with %q within %v", s, within)
		}
	}
}

// TestLastCall: a member that gossip on one node declares dead (here the
// verdict is handed to the node's delegate while the member runs, as a
// late node's own suspicion timeout does) is not reported while it
// answers a direct ping; once it stops answering, it is.
func TestLastCall(t *testing.T) {
	logs := &logLines{added: make(chan struct{}, 1)}
	nodes := startWorld(t, "lastcall", 3, func(i int, c *Config) {
		if i == 0 {
			c.Logger = log.New(logs, "", 0)
		}
	})
	var victim *memberlist.Node
	for _, m := range nodes[0].ml.Members() {
		if m.Name == nodes[2].Name() {
			victim = m
		}
	}
	if victim == nil {
		t.Fatal("rank 0 does not see rank 2")
	}
	(&delegate{nodes[0]}).NotifyLeave(victim) // gossip's verdict on rank 0
	logs.waitFor(t, "gossip declared rank 2 dead, but it answers a ping: not reported", 10*time.Second)
	select {
	case f := <-nodes[0].Failures():
		t.Fatalf("rank 0 reported %+v (%v) while rank 2 answers", f, f.Err)
	default:
	}
	// Rank 2 stops answering (a crash, silent): rank 0's next last call
	// reports it, and rank 1's gossip does too.
	nodes[2].shutdown(false)
	expectFailure(t, nodes, 2, ErrPeerDead, 10*time.Second)
}
