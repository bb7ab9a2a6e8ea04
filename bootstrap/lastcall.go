package bootstrap

// The last call: a gossip death is checked before it is reported.
//
// memberlist declares a member dead on this node when this node's
// suspicion of it times out, unless the member's refutation reached this
// node first. A frozen process, or one cut off, answers nothing. But the
// verdict may be this node's own lateness: on a loaded host its packets
// can go out or be read a second late, and it then suspects live members
// and misses their refutations. That was measured (RELIABILITY.md, the
// load soak with one rank per namespace host): a rank whose gossip ran
// about a second late declared a live rank dead 4 ms before that rank's
// refutation of its suspicion arrived, and the job failed.
//
// So a member that gossip drops from the view, other than one that left
// or one whose process runs on this host (Config.Running), is pinged
// directly (lastCallPings UDP pings at once, each waiting ProbeTimeout)
// before it is reported. An answer means its process runs now: it stays
// out of the view, unreported, until memberlist hears its refutation and
// takes it back, and is pinged again every lastCallEvery while it stays
// out. No answer reports it. A frozen member's report comes ProbeTimeout
// later than gossip's verdict; a dead one's is usually reported before,
// by a refused connection (evidence.go).

import (
	"sync"
	"time"
)

const (
	lastCallPings = 2           // sent at once: one lost packet is not a death
	lastCallEvery = time.Second // how often a member that answered is pinged again while out of the view
)

// strAddr is a gossip address as memberlist's Ping takes it.
type strAddr string

func (a strAddr) Network() string { return "udp" }
func (a strAddr) String() string  { return string(a) }

// lastCallLocked starts the last call of name (gossip address addr),
// which gossip dropped from the view, unless one runs. n.mu is held.
func (n *Node) lastCallLocked(name, addr string) {
	if n.closed || n.reported[name] || n.calling[name] {
		return
	}
	n.calling[name] = true
	n.wg.Add(1) // shutdown sets closed under mu before it waits
	go n.lastCall(name, addr)
}

// lastCall pings name until it is reported (no answer), comes back into
// the view, or the node closes.
func (n *Node) lastCall(name, addr string) {
	defer n.wg.Done()
	for {
		alive := n.answers(name, addr)
		n.mu.Lock()
		n.viewMu.Lock()
		out := n.departed[name] && !n.gone[name]
		n.viewMu.Unlock()
		switch {
		case n.closed || !out || n.reported[name]:
			delete(n.calling, name)
			n.mu.Unlock()
			return
		case !alive:
			delete(n.calling, name)
			n.reportLocked(name, n.leaving[name])
			if !n.leaving[name] { // forming: a death (formloss.go)
				n.noteFormLossLocked(name, -1, n.deathCauseLocked(name))
			}
			n.viewMu.Lock()
			n.viewGen++ // a Grow waiting for it derives its table again (growOut)
			n.viewMu.Unlock()
			n.mu.Unlock()
			n.signal()
			return
		}
		r := n.inWorld[name]
		n.mu.Unlock()
		if n.cfg.Logger != nil {
			n.cfg.Logger.Printf("[WARN] bootstrap: gossip declared rank %d dead, but it answers a ping: not reported", r)
		}
		if !n.sleep(lastCallEvery) {
			n.mu.Lock()
			delete(n.calling, name)
			n.mu.Unlock()
			return
		}
	}
}

// answers pings name at addr and says whether any ping was answered.
func (n *Node) answers(name, addr string) bool {
	var (
		wg sync.WaitGroup
		mu sync.Mutex
		ok bool
	)
	for range lastCallPings {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := n.ml.Ping(name, strAddr(addr)); err == nil {
				mu.Lock()
				ok = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return ok
}
