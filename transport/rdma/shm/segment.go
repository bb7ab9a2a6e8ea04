//go:build linux

package shm

import (
	"encoding/binary"
	"fmt"
	"os"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// A segment is the shared memory one side of a connection owns and both map
// (a memfd passed with SCM_RIGHTS at setup). The owner produces into its
// ring and publishes its posted receives and its device's remotely
// accessible regions; the peer consumes the ring, reads the receive lengths
// and checks its writes and reads against the key table.
//
//	0     header: magic, owner pid, sizes
//	64    ring head (owner) and the data doorbell's flag (peer sleeps on it)
//	128   ring tail (peer) and the space doorbell's flag (owner sleeps on it)
//	192   receives posted (owner), the receive doorbell's flag (peer sleeps
//	      on it) and a lower bound of the posted receives' capacity
//	256   direct-send users (peer), the receive fence and the closing
//	      flag (owner)
//	4096  receives: capacity and arena offset of each posted receive, by
//	      sequence mod depth
//	...   keys: maxKeys slots of the owner device's key table
//	...   mailbox: rdma.MailboxBytes the peer writes for the owner
//	      (Conn.Mailbox's In on the owner's side, Out on the peer's)
//	...   ring: ringSize bytes of records
const (
	segMagic   = 0x6d68736e75726f67 // "gorunshm"
	segVersion = 6                  // 5: doorbells ring eventfds passed at setup, not futex words; 6: the mailbox

	offMagic     = 0
	offPid       = 8
	offVersion   = 12
	offRecvDepth = 16
	offMaxKeys   = 20
	offRingSize  = 24
	offFences    = 28 // u32: membarrierFenceFlag if the owner fences its doorbell sleeps (fence.go)

	offHead        = 64
	offDataWaiters = 76
	offTail        = 128
	offSpaceWait   = 140
	offRecvPosted  = 192
	offRecvWaiters = 204
	offRecvMinCap  = 208 // u64: no receive posted and not yet consumed is smaller
	offDirectUsers = 256 // u32: peer sends copying into our receive buffers
	offRecvFenced  = 260 // u32: 1 once our receive buffers may be released
	offClosing     = 264 // u32: 1 once the owner closes the connection (retire); 0 from a peer of an earlier build
	offRecvLens    = 4096

	// maxKeys bounds the remotely accessible regions of one device.
	maxKeys = 4096
	// slotSize is one key-table entry, a cache line so that the users
	// counters of two regions do not share one.
	slotSize = 64
	// ringSize is the per-direction message ring: large enough to keep a
	// fragmented send pipelined, small enough to stay in cache.
	ringSize = 1 << 20
)

type segment struct {
	mem       []byte // the whole mapping
	recvDepth int
	keysOff   int
	ringOff   int
	// The eventfds of the process that owns the segment and of the other
	// one (bell.go): the data and receive doorbells wake the other side
	// (the receiver, a sender waiting for receives), the space doorbell
	// the owner (a sender waiting for room in its ring). Closed by the
	// conn with the mapping.
	owner, other *bellFd
}

func segLayout(recvDepth int) (keysOff, ringOff, size int) {
	keysOff = alignUp(offRecvLens+recvEntry*recvDepth, 4096)
	ringOff = alignUp(keysOff+maxKeys*slotSize, 4096) + rdma.MailboxBytes
	return keysOff, ringOff, ringOff + ringSize
}

// mailbox is the segment's mailbox (rdma.Mailbox), just before the ring.
func (s *segment) mailbox() []byte {
	return s.mem[s.ringOff-rdma.MailboxBytes : s.ringOff : s.ringOff]
}

func alignUp(n, a int) int { return (n + a - 1) &^ (a - 1) }

// newSegment creates and maps a segment; the caller closes fd once the
// peer has it.
func newSegment(recvDepth int) (*segment, int, error) {
	keysOff, ringOff, size := segLayout(recvDepth)
	fd, err := newMemfd("gorun-shm-conn", int64(size))
	if err != nil {
		return nil, -1, err
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, -1, os.NewSyscallError("mmap", err)
	}
	_ = unix.Madvise(mem, unix.MADV_DONTFORK)
	populate(mem)
	binary.LittleEndian.PutUint32(mem[offPid:], uint32(os.Getpid()))
	binary.LittleEndian.PutUint32(mem[offVersion:], segVersion)
	binary.LittleEndian.PutUint32(mem[offRecvDepth:], uint32(recvDepth))
	binary.LittleEndian.PutUint32(mem[offMaxKeys:], maxKeys)
	binary.LittleEndian.PutUint32(mem[offRingSize:], ringSize)
	binary.LittleEndian.PutUint64(mem[offRecvMinCap:], ^uint64(0))
	if registerFences() {
		binary.LittleEndian.PutUint32(mem[offFences:], membarrierFenceFlag)
	}
	atomic.StoreUint64((*uint64)(unsafe.Pointer(&mem[offMagic])), segMagic)
	return &segment{mem: mem, recvDepth: recvDepth, keysOff: keysOff, ringOff: ringOff}, fd, nil
}

// mapSegment maps the peer's segment from fd (which it closes) and checks
// its header.
func mapSegment(fd int) (*segment, error) {
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, os.NewSyscallError("fstat", err)
	}
	size := int(st.Size)
	if size < offRecvLens+4096 {
		return nil, fmt.Errorf("peer segment too small (%d bytes)", size)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, os.NewSyscallError("mmap", err)
	}
	_ = unix.Madvise(mem, unix.MADV_DONTFORK)
	s := &segment{mem: mem}
	depth := int(binary.LittleEndian.Uint32(mem[offRecvDepth:]))
	keysOff, ringOff, want := segLayout(depth)
	if s.u64(offMagic).Load() != segMagic || binary.LittleEndian.Uint32(mem[offVersion:]) != segVersion ||
		binary.LittleEndian.Uint32(mem[offMaxKeys:]) != maxKeys || binary.LittleEndian.Uint32(mem[offRingSize:]) != ringSize ||
		depth <= 0 || want != size {
		unix.Munmap(mem)
		return nil, fmt.Errorf("peer segment has an unknown layout")
	}
	s.recvDepth, s.keysOff, s.ringOff = depth, keysOff, ringOff
	populate(mem) // its size checked: a peer's memfd of any size is not populated
	return s, nil
}

// fences reports whether the segment's owner fences its doorbell sleeps
// (fence.go). A peer of an earlier version wrote 0 there.
func (s *segment) fences() bool {
	return binary.LittleEndian.Uint32(s.mem[offFences:])&membarrierFenceFlag != 0
}

func (s *segment) unmap() {
	if s != nil && s.mem != nil {
		unix.Munmap(s.mem)
		s.mem = nil
	}
}

func (s *segment) u64(off int) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&s.mem[off]))
}

func (s *segment) u32(off int) *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(&s.mem[off]))
}

func (s *segment) dataBell() doorbell {
	return doorbell{waiters: s.u32(offDataWaiters), efd: s.other}
}

func (s *segment) spaceBell() doorbell {
	return doorbell{waiters: s.u32(offSpaceWait), efd: s.owner}
}

func (s *segment) recvBell() doorbell {
	return doorbell{waiters: s.u32(offRecvWaiters), efd: s.other}
}

// A posted receive's entry: capacity, arena offset, address.
const recvEntry = 24

func (s *segment) recvLen(seq uint64) *atomic.Uint64 {
	return s.u64(offRecvLens + recvEntry*int(seq%uint64(s.recvDepth)))
}

// putRecv describes posted receive seq (capacity, recvOff, recvAddr) with
// plain stores; the owner then publishes it with the count's atomic store
// (x86 keeps stores in order).
func (s *segment) putRecv(seq, capacity, off, addr uint64) {
	e := s.mem[offRecvLens+recvEntry*int(seq%uint64(s.recvDepth)):][:recvEntry]
	binary.LittleEndian.PutUint64(e[0:], capacity)
	binary.LittleEndian.PutUint64(e[8:], off)
	binary.LittleEndian.PutUint64(e[16:], addr)
}

// recvOff is where a posted receive's single buffer lies in the owner's
// arena, or noArena: a sender may then copy straight into it.
func (s *segment) recvOff(seq uint64) *atomic.Uint64 {
	return s.u64(offRecvLens + recvEntry*int(seq%uint64(s.recvDepth)) + 8)
}

// recvAddr is the address of a posted receive's single buffer of
// registered Go memory in the owner (0 if none): a sender with
// cross-memory attach may write a large message straight into it.
func (s *segment) recvAddr(seq uint64) *atomic.Uint64 {
	return s.u64(offRecvLens + recvEntry*int(seq%uint64(s.recvDepth)) + 16)
}

func (s *segment) ring() []byte { return s.mem[s.ringOff : s.ringOff+ringSize] }

// A key slot describes one remotely accessible region of the owner's
// device. The owner writes the fields, then sets state; to revoke it clears
// state, then waits until users (the peer's copies in flight) is zero. The
// peer increments users, then checks state and the fields, copies, and
// decrements users. Either the peer sees the revocation or the owner sees
// the peer's copy and waits for it: once revocation returns, no copy
// touches the region.
const (
	slotRKey   = 0  // u32
	slotState  = 4  // u32: 1 valid
	slotAccess = 8  // u32
	slotUsers  = 12 // u32
	slotAddr   = 16 // u64: the owner's virtual address
	slotLen    = 24 // u64
	slotOff    = 32 // u64: offset in the owner's arena, or noArena
)

const noArena = ^uint64(0)

type slotVal struct {
	rkey   uint32
	access uint32
	addr   uint64
	length uint64
	off    uint64
	info   *mrInfo // the owner's own record, not published
}

func (s *segment) slot(i int) int { return s.keysOff + i*slotSize }

func (s *segment) publish(i int, v slotVal) {
	o := s.slot(i)
	s.u32(o + slotState).Store(0)
	s.u32(o + slotRKey).Store(v.rkey)
	s.u32(o + slotAccess).Store(v.access)
	s.u64(o + slotAddr).Store(v.addr)
	s.u64(o + slotLen).Store(v.length)
	s.u64(o + slotOff).Store(v.off)
	s.u32(o + slotState).Store(1)
}

// revoke clears slot i and reports whether no peer copy is in flight.
func (s *segment) revoke(i int) {
	// Then the users count is loaded (Device.release), while enter adds
	// to it, then loads the state: a locked exchange, as storeSC64 says.
	s.u32(s.slot(i) + slotState).Swap(0)
}

func (s *segment) slotUsers(i int) *atomic.Uint32 { return s.u32(s.slot(i) + slotUsers) }

func (s *segment) clearSlot(i int) { s.u32(s.slot(i) + slotRKey).Store(0) }

// findKey scans the key table for rkey (a cache miss on the initiator).
func (s *segment) findKey(rkey uint32) int {
	for i := 0; i < maxKeys; i++ {
		o := s.slot(i)
		if s.u32(o+slotRKey).Load() == rkey && s.u32(o+slotState).Load() == 1 {
			return i
		}
	}
	return -1
}

// enter takes a reference on slot i for a copy of n bytes at addr with
// access need. It returns the region's offset in the owner's arena (noArena
// for registered Go memory) and false if the key, bounds or access do not
// allow the copy; on true the caller must call leave(i).
func (s *segment) enter(i int, rkey uint32, addr uint64, n int, need uint32) (uint64, bool) {
	o := s.slot(i)
	users := s.u32(o + slotUsers)
	users.Add(1)
	if s.u32(o+slotState).Load() != 1 || s.u32(o+slotRKey).Load() != rkey {
		users.Add(^uint32(0))
		return 0, false
	}
	base, length := s.u64(o+slotAddr).Load(), s.u64(o+slotLen).Load()
	if s.u32(o+slotAccess).Load()&need != need || addr < base || addr-base > length || uint64(n) > length-(addr-base) {
		users.Add(^uint32(0))
		return 0, false
	}
	off := s.u64(o + slotOff).Load()
	if off != noArena {
		off += addr - base
	}
	return off, true
}

func (s *segment) leave(i int) { s.u32(s.slot(i) + slotUsers).Add(^uint32(0)) }

// populate maps every page of a segment now rather than at its first
// touch, and reads every cache line once. The ring's first lap otherwise
// took a page fault per 4 KiB on each side and, pages mapped, still ran
// 1.5-2× slower than the laps after it: each record went to a line that
// no cache held (a 2-rank barrier, 0.9 µs from the second lap on, took
// 1.3-1.8 µs through the first 16,000 records, and a 256 KiB ring ended
// the slow stretch after 4,000). The read leaves the lines in the caches
// for the first lap. Kernels before 5.14 lack MADV_POPULATE_WRITE; there
// the read faults the pages in.
func populate(mem []byte) {
	_ = unix.Madvise(mem, unix.MADV_POPULATE_WRITE)
	var x byte
	for i := 0; i < len(mem); i += 64 {
		x += mem[i]
	}
	warmSink.Store(uint32(x))
}

var warmSink atomic.Uint32 // keeps populate's reads
