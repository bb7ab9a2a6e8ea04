package rdma

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"
)

// MR is a registered memory region.
type MR struct {
	buf    []byte
	addr   uint64
	lkey   uint32
	rkey   uint32
	access Access
	owner  any // the provider's protection domain; MRs of another device are rejected

	users atomic.Int64              // outstanding requests using the region
	state atomic.Int32              // mrValid, mrClosing, mrDraining, mrGone
	drain atomic.Pointer[drainWait] // DeregisterWait's, while it waits

	release func(*MR) error
	// Handle is the provider's own data (an ibv_mr, a memfd offset, ...).
	Handle any
}

const (
	mrValid int32 = iota
	mrClosing
	mrGone
	mrDraining // DeregisterWait waits for the last user
)

// drainWait is closed by the Release that ends a draining region's last use.
type drainWait struct {
	ch   chan struct{}
	once sync.Once
}

// NewMR is for providers: it describes buf registered with access under the
// given keys in the protection domain owner. release runs once, on the first
// successful Deregister.
func NewMR(buf []byte, access Access, lkey, rkey uint32, owner any, release func(*MR) error) *MR {
	return &MR{buf: buf, addr: AddrOf(buf), lkey: lkey, rkey: rkey, access: access, owner: owner, release: release}
}

// AddrOf is the virtual address of buf's first byte (0 for an empty slice).
func AddrOf(buf []byte) uint64 {
	if cap(buf) == 0 {
		return 0
	}
	return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(buf))))
}

func (m *MR) Addr() uint64   { return m.addr }
func (m *MR) Len() int       { return len(m.buf) }
func (m *MR) LKey() uint32   { return m.lkey }
func (m *MR) RKey() uint32   { return m.rkey }
func (m *MR) Access() Access { return m.access }

// Bytes is the registered memory.
func (m *MR) Bytes() []byte { return m.buf }

// Owner is the protection domain the region belongs to.
func (m *MR) Owner() any { return m.owner }

// Valid reports whether the region is still registered.
func (m *MR) Valid() bool { return m.state.Load() == mrValid }

// Deregister releases the registration. It fails with ErrBusy while a
// request that uses the region has not completed.
func (m *MR) Deregister() error {
	if !m.state.CompareAndSwap(mrValid, mrClosing) {
		return &OpError{Op: "deregister", Provider: "mr", Err: ErrClosed}
	}
	if m.users.Load() > 0 {
		m.state.Store(mrValid)
		return &OpError{Op: "deregister", Provider: "mr", Err: ErrBusy}
	}
	m.state.Store(mrGone)
	if m.release != nil {
		return m.release(m)
	}
	return nil
}

// DeregisterWait is Deregister for a region that requests in flight may
// still use (a peer's copy into it, on a closing device): it refuses new
// requests at once and deregisters when the last one releases the region.
// If ctx ends first, the region stays registered and it fails with ErrBusy.
func (m *MR) DeregisterWait(ctx context.Context) error {
	if !m.state.CompareAndSwap(mrValid, mrClosing) {
		return &OpError{Op: "deregister", Provider: "mr", Err: ErrClosed}
	}
	w := &drainWait{ch: make(chan struct{})}
	m.drain.Store(w)
	// Release adds, then loads the state; this stores the state, then
	// loads the count: one of the two sees the other. A locked exchange,
	// not Store: under the race detector Store is a release store that the
	// load may pass (golang/go#58020).
	m.state.Swap(mrDraining)
	if m.users.Load() > 0 {
		select {
		case <-w.ch:
		case <-ctx.Done():
			m.state.Store(mrValid)
			m.drain.Store(nil)
			return &OpError{Op: "deregister", Provider: "mr", Err: fmt.Errorf("%w (%w)", ErrBusy, ctx.Err())}
		}
	}
	m.drain.Store(nil)
	m.state.Store(mrGone)
	if m.release != nil {
		return m.release(m)
	}
	return nil
}

// Acquire is for providers: it counts one outstanding request on the region
// and reports false if the region is no longer registered.
func (m *MR) Acquire() bool {
	m.users.Add(1)
	if m.state.Load() != mrValid {
		m.Release()
		return false
	}
	return true
}

// Release undoes one Acquire.
func (m *MR) Release() {
	if m.users.Add(-1) == 0 && m.state.Load() == mrDraining {
		if w := m.drain.Load(); w != nil {
			w.once.Do(func() { close(w.ch) })
		}
	}
}

// Range returns the registered bytes [addr, addr+n) if they lie inside the
// region, for providers serving a remote request.
func (m *MR) Range(addr uint64, n int) ([]byte, bool) {
	if n < 0 || addr < m.addr {
		return nil, false
	}
	off := addr - m.addr
	if off > uint64(len(m.buf)) || uint64(n) > uint64(len(m.buf))-off {
		return nil, false
	}
	return m.buf[off : off+uint64(n) : off+uint64(n)], true
}

// Covers reports whether buf lies inside the region.
func (m *MR) Covers(buf []byte) bool {
	if len(buf) == 0 {
		return true
	}
	_, ok := m.Range(AddrOf(buf), len(buf))
	return ok
}
