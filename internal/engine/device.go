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
//
// A failed CQ (rdma.CQ.Err: a verbs CQ that overran, a device that died)
// hands out a token for every Arm at once, and the watcher would poll and
// arm it in a loop. So when a token brings the watcher nothing, it asks
// Err (a Run never does: its fast path pays nothing for this); a failed
// CQ fails every link of the device with its error, naming each peer as
// a broken connection does, refuses new links, and is neither polled nor
// armed by the watcher again. Its error wraps ErrDeviceFailed: an engine
// whose link fails with it blames its own rank, not the peer (linkFailed).

import (
	"fmt"
	"slices"
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

	// The engines that run collectives on this device (copy on write,
	// under engMu): the watcher reads their run counters (Engine.runs),
	// which each engine publishes with plain release stores, where shared
	// counters here cost every Run two locked additions.
	engMu   sync.Mutex
	engines atomic.Pointer[[]*Engine]

	// cqErr is the CQ's failure once the watcher found it (failCQ); set
	// under tabMu and pollMu, and closes cqDown.
	cqErr  atomic.Pointer[error]
	cqDown chan struct{}

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
		cqDown: make(chan struct{}), stop: make(chan struct{}), stopped: make(chan struct{})}
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
		runs, busy := d.runs()
		if !busy && (seen < 0 || runs == seen) {
			d.CQ.Arm()
			d.pollAll() // what came before the arm
		} else {
			t.Reset(idleArm)
		}
		seen = runs
		select {
		case <-d.CQ.Notify():
			if d.pollAll() == 0 {
				// A stale token, or a failed CQ (see the file comment).
				if err := d.CQ.Err(); err != nil {
					d.failCQ(err)
					<-d.stop
					return
				}
			}
		case <-t.C:
		case <-d.stop:
			return
		}
	}
}

// runs sums the run counters of the device's engines (Engine.runs); busy
// says that one of them is in a Run.
func (d *Device) runs() (sum int64, busy bool) {
	if es := d.engines.Load(); es != nil {
		for _, e := range *es {
			v := e.runs.Load()
			sum += int64(v)
			busy = busy || v&1 != 0
		}
	}
	return sum, busy
}

// watchEngine adds e to the engines whose Runs the watcher follows.
func (d *Device) watchEngine(e *Engine) {
	d.engMu.Lock()
	defer d.engMu.Unlock()
	var es []*Engine
	if old := d.engines.Load(); old != nil {
		es = *old
	}
	if slices.Contains(es, e) {
		return
	}
	es = append(slices.Clip(es), e)
	d.engines.Store(&es)
}

// unwatchEngine removes e (closed) from them.
func (d *Device) unwatchEngine(e *Engine) {
	d.engMu.Lock()
	defer d.engMu.Unlock()
	if old := d.engines.Load(); old != nil {
		es := slices.DeleteFunc(slices.Clone(*old), func(x *Engine) bool { return x == e })
		d.engines.Store(&es)
	}
}

// pollAll polls and dispatches until the CQ is empty; it returns the
// completions handled.
func (d *Device) pollAll() int {
	d.pollMu.Lock()
	n := 0
	for {
		k := d.pollLocked(nil)
		n += k
		if k < pollBatch {
			break
		}
	}
	d.pollMu.Unlock()
	return n
}

// failCQ fails every link of the device whose receive queue has not
// ended with err, the CQ's failure: their completions will not come. A
// link to a peer that said bye fails nothing, as its flushed receives
// would not.
func (d *Device) failCQ(err error) {
	err = fmt.Errorf("%w: the completion queue of device %s failed: %w", ErrDeviceFailed, d.Dev.Name(), err)
	d.tabMu.Lock()
	d.pollMu.Lock()
	// What it held when it failed (which came after the watcher's poll,
	// a provider's flushes) is dispatched first: links fail as it says.
	for d.pollLocked(nil) == pollBatch {
	}
	d.cqErr.Store(&err)
	links := slices.Clone(d.links)
	d.tabMu.Unlock()
	for _, l := range links {
		if l != nil && !l.recvOut.Load() {
			l.recvFailed(err) // as dispatch would, under pollMu
		}
	}
	d.pollMu.Unlock()
	close(d.cqDown)
}

// Err is the failure of the device's CQ once its watcher has found it, or
// nil; new links are then refused with it. It wraps ErrDeviceFailed.
func (d *Device) Err() error {
	if p := d.cqErr.Load(); p != nil {
		return *p
	}
	return nil
}

// Down is closed when the device's CQ has failed (Err then says why).
func (d *Device) Down() <-chan struct{} { return d.cqDown }

// tryPoll polls once for engine self unless someone else is polling (who
// then dispatches and wakes the engines concerned); it returns the
// completions handled.
func (d *Device) tryPoll(self *Engine) int {
	if !d.pollMu.TryLock() {
		return 0
	}
	n := d.pollLocked(self)
	d.pollMu.Unlock()
	return n
}

// pollLocked polls once and dispatches; self is the engine polling (nil:
// the watcher), which looks at its links again without a wake-up.
func (d *Device) pollLocked(self *Engine) int {
	n := d.CQ.Poll(d.wcs[:])
	for i := range n {
		d.dispatch(&d.wcs[i], self)
	}
	return n
}

// addLink gives l an id, under which its completions are dispatched,
// unless the CQ has failed or the device has maxLinks links.
func (d *Device) addLink(l *Link) error {
	d.tabMu.Lock()
	defer d.tabMu.Unlock()
	d.pollMu.Lock()
	defer d.pollMu.Unlock()
	if p := d.cqErr.Load(); p != nil {
		return *p
	}
	if n := len(d.free); n > 0 {
		l.id = d.free[n-1]
		d.free = d.free[:n-1]
		d.links[l.id] = l
		return nil
	}
	if len(d.links) >= maxLinks {
		return fmt.Errorf("collectives: more than %d links on device %s", maxLinks, d.Dev.Name())
	}
	l.id = uint32(len(d.links))
	d.links = append(d.links, l)
	return nil
}

// removeLink drops l from dispatch; completions still to come for it are
// discarded. It dispatches what the CQ holds first.
func (d *Device) removeLink(l *Link) {
	d.tabMu.Lock()
	defer d.tabMu.Unlock()
	d.pollMu.Lock()
	defer d.pollMu.Unlock()
	for d.pollLocked(nil) == pollBatch {
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

// dispatch hands one completion to its link; pollMu is held, self is the
// engine polling or nil.
func (d *Device) dispatch(wc *rdma.WC, self *Engine) {
	id := int(wc.WRID >> 48)
	if id >= len(d.links) || d.links[id] == nil {
		return // a link already closed
	}
	l := d.links[id]
	kind := wc.WRID >> valueBits & 0xf
	value := wc.WRID & (1<<valueBits - 1)
	if kind == kindRecv {
		l.onRecv(wc, value, self)
	} else {
		l.onSend(wc, kind, value, self)
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
