package engine

// Device: one opened provider, its registration cache, and the completion
// queue that every link on it shares.
//
// Progress. The completions of all links of a device arrive in one CQ.
// Whoever holds pollMu polls it and dispatches each completion to its link
// (the wrid names the link, see wrid below): the goroutine that runs a
// collective (Engine.Run) does it itself, which is the fast path, with no
// goroutine between a peer's message and the engine. The device's watcher
// goroutine does it when the CQ's notification fires, which happens only
// when the CQ was armed: by a Run about to sleep, by the watcher itself
// while links are being established, and once no Run has been in progress
// on the device for idleArm, so that abort notices and byes that arrive
// between collectives still find an owner. While collectives follow each
// other closely the CQ stays unarmed, so providers make no wake-up calls.

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// idleArm is how long a device goes without a Run before its watcher arms
// the CQ. Shorter hands more first messages of a collective to the
// watcher (a wake-up each); longer delays abort notices between
// collectives (a Run in progress handles them at once).
const idleArm = 5 * time.Millisecond

// pollBatch is how many completions one Poll takes.
const pollBatch = 32

// maxLinks bounds the links of one device (the wrid's link field).
const maxLinks = 1 << 16

// Device is one opened provider with its registration cache and its
// shared completion queue.
type Device struct {
	Dev   rdma.Device
	Cache *RegCache
	CQ    rdma.CQ
	// CopyMax is the largest data payload this device's links copy behind
	// its header and post unsignaled (link.go); 0 means smallMax. Set it
	// before the first link is made.
	CopyMax int
	cur     [2]*rdma.MR // the running operation's Work and Input MRs, nil until first needed (Engine.bufMR)

	pollMu sync.Mutex // held while polling and dispatching
	wcs    [pollBatch]rdma.WC

	// links by id; written under both tabMu and pollMu, read by dispatch
	// under pollMu.
	tabMu sync.Mutex
	links []*Link
	free  []uint32

	// Runs begun and ended on this device (no clock read per Run): none is
	// in progress when they are equal. Two counters, not an active count
	// beside ends: a Run pays two locked additions, not three.
	begun atomic.Int64
	ends  atomic.Int64

	stop     chan struct{}
	stopped  chan struct{}
	stopOnce sync.Once
}

// NewDevice wraps dev with a registration cache of cacheSize entries and a
// shared completion queue, and starts the device's watcher.
func NewDevice(dev rdma.Device, cacheSize int) (*Device, error) {
	cq, err := dev.CreateCQ(0)
	if err != nil {
		return nil, err
	}
	d := &Device{Dev: dev, Cache: NewRegCache(dev, cacheSize), CQ: cq,
		stop: make(chan struct{}), stopped: make(chan struct{})}
	go d.watch()
	return d, nil
}

// QPInit binds a new connection's queues to the device's CQ; pass it to
// DialQP and AcceptQP for connections that Establish will use.
func (d *Device) QPInit() rdma.QPInit { return rdma.QPInit{SendCQ: d.CQ, RecvCQ: d.CQ} }

// Close stops the watcher and closes the CQ, the registration cache and the
// provider's device. Every link must have been closed.
func (d *Device) Close() error {
	d.stopOnce.Do(func() { close(d.stop) })
	<-d.stopped
	d.Cache.Close()
	err := d.Dev.Close()
	d.CQ.Close()
	return err
}

// watch handles completions while nobody else polls; see the file comment.
func (d *Device) watch() {
	defer close(d.stopped)
	t := time.NewTimer(idleArm)
	defer t.Stop()
	seen := int64(-1) // Runs ended at the last look; -1: idle from the start
	for {
		// Idle once no Run is active and none ended since the last look,
		// at least idleArm ago unless a notification came sooner.
		// ends first: begun never falls below it, so equal values mean
		// that no Run was in progress when begun was read.
		ends := d.ends.Load()
		if d.begun.Load() == ends && (seen < 0 || ends == seen) {
			d.CQ.Arm()
			d.pollAll() // what came before the arm
		} else {
			t.Reset(idleArm)
		}
		seen = ends
		select {
		case <-d.CQ.Notify():
			d.pollAll()
		case <-t.C:
		case <-d.stop:
			return
		}
	}
}

// pollAll polls and dispatches until the CQ is empty.
func (d *Device) pollAll() {
	d.pollMu.Lock()
	for d.pollLocked() == pollBatch {
	}
	d.pollMu.Unlock()
}

// tryPoll polls once unless someone else is polling (who then dispatches
// and wakes the engines concerned); it returns the completions handled.
func (d *Device) tryPoll() int {
	if !d.pollMu.TryLock() {
		return 0
	}
	n := d.pollLocked()
	d.pollMu.Unlock()
	return n
}

func (d *Device) pollLocked() int {
	n := d.CQ.Poll(d.wcs[:])
	for i := range n {
		d.dispatch(&d.wcs[i])
	}
	return n
}

// addLink gives l an id, under which its completions are dispatched.
func (d *Device) addLink(l *Link) bool {
	d.tabMu.Lock()
	defer d.tabMu.Unlock()
	d.pollMu.Lock()
	defer d.pollMu.Unlock()
	if n := len(d.free); n > 0 {
		l.id = d.free[n-1]
		d.free = d.free[:n-1]
		d.links[l.id] = l
		return true
	}
	if len(d.links) >= maxLinks {
		return false
	}
	l.id = uint32(len(d.links))
	d.links = append(d.links, l)
	return true
}

// removeLink drops l from dispatch; completions still to come for it are
// discarded. It dispatches what the CQ holds first.
func (d *Device) removeLink(l *Link) {
	d.tabMu.Lock()
	defer d.tabMu.Unlock()
	d.pollMu.Lock()
	defer d.pollMu.Unlock()
	for d.pollLocked() == pollBatch {
	}
	if int(l.id) < len(d.links) && d.links[l.id] == l {
		d.links[l.id] = nil
		d.free = append(d.free, l.id)
	}
}

// The wrid of every request a link posts: link id (16 bits), kind (4
// bits), value (44 bits: a receive's control slot, a data message's
// number).
const (
	kindRecv  uint64 = iota
	kindData         // a data message's header write: value is its number
	kindBye          // the signaled bye
	kindCtrl         // unsignaled control sends and payload writes
	valueBits = 44
)

func wrid(id uint32, kind, value uint64) uint64 {
	return uint64(id)<<48 | kind<<valueBits | value&(1<<valueBits-1)
}

// dispatch hands one completion to its link; pollMu is held.
func (d *Device) dispatch(wc *rdma.WC) {
	id := int(wc.WRID >> 48)
	if id >= len(d.links) || d.links[id] == nil {
		return // a link already closed
	}
	l := d.links[id]
	kind := wc.WRID >> valueBits & 0xf
	value := wc.WRID & (1<<valueBits - 1)
	if kind == kindRecv {
		l.onRecv(wc, value)
	} else {
		l.onSend(wc, kind, value)
	}
}

var monoStart = time.Now()

// monoNow is a monotonic clock in nanoseconds.
func monoNow() int64 { return int64(time.Since(monoStart)) }

// copyMax is CopyMax, or smallMax when unset.
func (d *Device) copyMax() int {
	if d.CopyMax > 0 {
		return d.CopyMax
	}
	return smallMax
}
