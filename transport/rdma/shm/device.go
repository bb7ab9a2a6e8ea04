//go:build linux

package shm

import (
	"context"
	"errors"
	"os"
	"sync"

	"github.com/gorun-hpc/gorun/internal/jobenv"
	"github.com/gorun-hpc/gorun/transport/rdma"
	"github.com/gorun-hpc/gorun/transport/rdma/internal/soft"
)

const provider = "shm"

func init() {
	rdma.RegisterProviderInfo(rdma.ProviderInfo{Name: provider, Reach: rdma.ReachHost, Preference: 20}, open)
}

// Device is the shm protection domain: a key table, a memfd arena for
// Alloc, and the connections and listeners opened on it.
type Device struct {
	cfg   rdma.Config
	pd    *soft.PD
	arena *arena
	// cma says whether registered Go memory may be reached with
	// process_vm_writev/readv; GORUN_SHM_CMA=0 turns it off (the peer then
	// copies, see fallback.go). Each connection also probes it.
	cma     bool
	mailbox bool      // offer connections mailboxes (rdma.Mailbox); GORUN_SHM_MAILBOX=0 turns them off
	cmaWarn sync.Once // the fallback is logged once per device
	counts  counts    // refusals (counters.go)

	mu        sync.Mutex
	closed    bool
	slots     [maxKeys]slotVal // published remote regions; rkey 0 = free
	conns     map[*conn]struct{}
	listeners map[*listener]struct{}

	qmu        sync.Mutex    // a leaf lock: mrInfo.frozen and quarantine
	quarantine []quarantined // arena ranges frozen peers may still write (quarantine.go)
}

// mrInfo is the provider's handle of a region.
type mrInfo struct {
	slot int    // key-table slot, -1 if the region is not remotely accessible
	mem  []byte // the arena mapping (Alloc), nil for Register
	off  uint64 // arena offset
	// frozen holds a pidfd (-1: unknown) of each peer found frozen in a
	// copy into mem, which it may finish when it resumes (quarantine.go).
	// Guarded by Device.qmu.
	frozen []int
}

func open(cfg rdma.Config) (rdma.Device, error) {
	a, err := newArena()
	if err != nil {
		return nil, rdma.NewOpError(provider, "open", err)
	}
	return &Device{
		cfg:       cfg,
		pd:        soft.NewPD(provider),
		arena:     a,
		cma:       os.Getenv(jobenv.ShmCMA) != "0",
		mailbox:   os.Getenv(jobenv.ShmMailbox) != "0",
		conns:     make(map[*conn]struct{}),
		listeners: make(map[*listener]struct{}),
	}, nil
}

func (d *Device) Name() string { return provider }

// Register makes buf (Go memory, pinned) usable by this device. Peers reach
// it with cross-memory attach.
func (d *Device) Register(buf []byte, access rdma.Access) (*rdma.MR, error) {
	if len(buf) == 0 { // as ibv_reg_mr: a zero-byte transfer needs no region
		return nil, rdma.NewOpError(provider, "register", rdma.ErrInvalid)
	}
	return d.add(buf, access, &mrInfo{slot: -1, off: noArena})
}

// Alloc returns n bytes carved from the device's memfd arena. Peers map the
// arena, so their writes and reads are one memcpy.
func (d *Device) Alloc(n int, access rdma.Access) (*rdma.MR, error) {
	if n <= 0 {
		return nil, rdma.NewOpError(provider, "alloc", rdma.ErrInvalid)
	}
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
	if closed {
		return nil, rdma.NewOpError(provider, "alloc", rdma.ErrClosed)
	}
	d.reap()
	mem, off, err := d.arena.alloc(n, d.cfg.AllocNode())
	if err != nil {
		return nil, rdma.NewOpError(provider, "alloc", err)
	}
	mr, err := d.add(mem, access, &mrInfo{slot: -1, mem: mem, off: off})
	if err != nil {
		_ = d.arena.release(mem, off)
	}
	return mr, err
}

var errTooManyKeys = errors.New("too many remotely accessible regions")

func (d *Device) add(buf []byte, access rdma.Access, info *mrInfo) (*rdma.MR, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, rdma.NewOpError(provider, "register", rdma.ErrClosed)
	}
	remote := access&(rdma.AccessRemoteWrite|rdma.AccessRemoteRead) != 0
	if remote {
		for i := range d.slots {
			if d.slots[i].rkey == 0 {
				info.slot = i
				break
			}
		}
		if info.slot < 0 {
			return nil, rdma.NewOpError(provider, "register", errTooManyKeys)
		}
	}
	mr := d.pd.Add(buf, access, info, d.release)
	if remote {
		v := slotVal{rkey: mr.RKey(), access: uint32(access), addr: mr.Addr(), length: uint64(len(buf)), off: info.off, info: info}
		d.slots[info.slot] = v
		for c := range d.conns {
			c.local.publish(info.slot, v)
		}
	}
	return mr, nil
}

// release runs on Deregister. It revokes the region in every connection's
// key table and waits until no peer copy into or out of it is in flight,
// so that once Deregister returns no peer can touch the memory.
func (d *Device) release(mr *rdma.MR) error {
	info := mr.Handle.(*mrInfo)
	if info.slot >= 0 {
		d.mu.Lock()
		for c := range d.conns {
			c.local.revoke(info.slot)
		}
		for c := range d.conns {
			if !c.waitZero(c.local.slotUsers(info.slot)) {
				d.taint(info, c) // it may resume in the middle of a copy
			}
			c.local.clearSlot(info.slot)
		}
		d.slots[info.slot] = slotVal{}
		d.mu.Unlock()
	}
	if info.mem != nil {
		return rdma.NewOpError(provider, "deregister", d.releaseArena(info))
	}
	return nil
}

// addConn publishes the key table into c's segment and tracks c.
func (d *Device) addConn(c *conn) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return rdma.ErrClosed
	}
	for i, v := range d.slots {
		if v.rkey != 0 {
			c.local.publish(i, v)
		}
	}
	d.conns[c] = struct{}{}
	return nil
}

func (d *Device) removeConn(c *conn) {
	d.mu.Lock()
	delete(d.conns, c)
	d.mu.Unlock()
}

// retire takes c out of the device for Close. Like Deregister, it revokes
// every region in c's key table and waits for the peer's copies in flight
// (tainting a region a frozen peer is copying into): a closed connection's
// table is otherwise left valid in the peer's mapping, and a peer that
// resumes after a freeze (or merely runs late) would go on writing through
// its queued posts at the old offsets, into arena ranges that may by then
// hold other regions, such as a new link's buffers.
func (d *Device) retire(c *conn) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.conns, c)
	// Before the revokes: a peer that finds a key revoked reads it, and
	// takes the refusal for this close (execWrite), not an access error.
	c.local.u32(offClosing).Store(1)
	for i := range d.slots {
		if d.slots[i].rkey != 0 {
			c.local.revoke(i)
		}
	}
	frozen := false // found frozen: the other copies it holds are not waited for again
	for i := range d.slots {
		if d.slots[i].rkey != 0 {
			if users := c.local.slotUsers(i); users.Load() != 0 && (frozen || !c.waitZero(users)) {
				frozen = true
				d.taint(d.slots[i].info, c)
			}
			c.local.clearSlot(i)
		}
	}
}

func (d *Device) Listen(ctx context.Context, addr string) (rdma.Listener, error) {
	return d.listen(ctx, addr)
}

func (d *Device) Dial(ctx context.Context, addr string) (rdma.Conn, error) {
	c, err := d.dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Close closes every connection and listener, deregisters every region and
// frees the arena.
func (d *Device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	conns := make([]*conn, 0, len(d.conns))
	for c := range d.conns {
		conns = append(conns, c)
	}
	lns := make([]*listener, 0, len(d.listeners))
	for l := range d.listeners {
		lns = append(lns, l)
	}
	d.mu.Unlock()
	for _, l := range lns {
		l.Close()
	}
	for _, c := range conns {
		c.Close()
	}
	var first error
	for _, mr := range d.pd.All() {
		if err := mr.Deregister(); err != nil && first == nil && !errors.Is(err, rdma.ErrClosed) {
			first = err
		}
	}
	d.dropQuarantine()
	d.arena.close()
	return first
}
