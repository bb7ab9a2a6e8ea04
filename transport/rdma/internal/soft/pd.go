package soft

import (
	"crypto/rand"
	"encoding/binary"
	"runtime"
	"sync"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// PD is a protection domain: the table of a device's memory regions by key.
// Keys are random, so a peer cannot guess another region's rkey.
type PD struct {
	Provider string

	mu  sync.RWMutex
	mrs map[uint32]*rdma.MR
}

// NewPD returns an empty protection domain for the named provider.
func NewPD(provider string) *PD {
	return &PD{Provider: provider, mrs: make(map[uint32]*rdma.MR)}
}

func randomKey() uint32 {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("soft: crypto/rand failed: " + err.Error()) // the runtime guarantees it does not
	}
	return binary.LittleEndian.Uint32(b[:])
}

// Add registers buf under a fresh key. release runs on Deregister after the
// region has left the table. Go memory is pinned while registered.
func (pd *PD) Add(buf []byte, access rdma.Access, handle any, release func(*rdma.MR) error) *rdma.MR {
	// Pin is a no-op for memory outside the Go heap (mmap'd regions).
	var pin *runtime.Pinner
	if len(buf) > 0 {
		pin = new(runtime.Pinner)
		pin.Pin(&buf[0])
	}
	pd.mu.Lock()
	defer pd.mu.Unlock()
	key := randomKey()
	for key == 0 || pd.mrs[key] != nil {
		key = randomKey()
	}
	mr := rdma.NewMR(buf, access, key, key, pd, func(m *rdma.MR) error {
		pd.mu.Lock()
		delete(pd.mrs, m.RKey())
		pd.mu.Unlock()
		if pin != nil {
			pin.Unpin()
		}
		if release != nil {
			return release(m)
		}
		return nil
	})
	mr.Handle = handle
	pd.mrs[key] = mr
	return mr
}

// Register is a soft device's rdma.Device.Register: buf as it is, under
// a fresh key. closed says whether the device is closed (rdma.ErrClosed).
func (pd *PD) Register(buf []byte, access rdma.Access, closed bool) (*rdma.MR, error) {
	if len(buf) == 0 { // as ibv_reg_mr: a zero-byte transfer needs no region
		return nil, rdma.NewOpError(pd.Provider, "register", rdma.ErrInvalid)
	}
	if closed {
		return nil, rdma.NewOpError(pd.Provider, "register", rdma.ErrClosed)
	}
	return pd.Add(buf, access, nil, nil), nil
}

// Alloc is a soft device's rdma.Device.Alloc: n bytes mapped on NUMA node
// (MmapNode), unmapped on Deregister.
func (pd *PD) Alloc(n int, access rdma.Access, node int, closed bool) (*rdma.MR, error) {
	if n <= 0 {
		return nil, rdma.NewOpError(pd.Provider, "alloc", rdma.ErrInvalid)
	}
	if closed {
		return nil, rdma.NewOpError(pd.Provider, "alloc", rdma.ErrClosed)
	}
	buf, err := MmapNode(n, node)
	if err != nil {
		return nil, rdma.NewOpError(pd.Provider, "alloc", err)
	}
	return pd.Add(buf, access, nil, func(*rdma.MR) error { return Munmap(buf) }), nil
}

// Lookup returns the region with rkey, or nil.
func (pd *PD) Lookup(rkey uint32) *rdma.MR {
	pd.mu.RLock()
	defer pd.mu.RUnlock()
	return pd.mrs[rkey]
}

// Remote serves a peer's request for [addr, addr+n) under rkey with the
// access need. On success the region is acquired: call mr.Release when the
// copy is done. A nil MR means a remote access error.
func (pd *PD) Remote(rkey uint32, addr uint64, n int, need rdma.Access) ([]byte, *rdma.MR) {
	mr := pd.Lookup(rkey)
	if mr == nil || mr.Access()&need != need {
		return nil, nil
	}
	b, ok := mr.Range(addr, n)
	if !ok || !mr.Acquire() {
		return nil, nil
	}
	return b, mr
}

// All returns every registered region (for Device.Close).
func (pd *PD) All() []*rdma.MR {
	pd.mu.RLock()
	defer pd.mu.RUnlock()
	out := make([]*rdma.MR, 0, len(pd.mrs))
	for _, mr := range pd.mrs {
		out = append(out, mr)
	}
	return out
}
