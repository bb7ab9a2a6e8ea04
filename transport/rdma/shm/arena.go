//go:build linux

package shm

import (
	"errors"
	"os"
	"sort"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/gorun-hpc/gorun/internal/numa"
	"github.com/gorun-hpc/gorun/transport/rdma/internal/soft"
)

// arenaSize is the virtual size of a device's memfd arena. The file is
// sparse: pages exist only while an Alloc'd region covers them (a freed
// range is punched out), so the size only bounds how much may be Alloc'd
// at once. A process maps a peer's whole arena once (MAP_NORESERVE), for
// all its connections to it (mapPeerArena): 64 GiB on a 64-bit platform,
// 128 MiB on a 32-bit one, whose 3 GiB of address space must hold a
// mapping for every peer device.
const arenaSize = 1 << (27 + 9*(strconv.IntSize/64))

// newMemfd creates a close-on-exec memfd of size bytes, readable and
// writable by its owner only (memfds start at mode 0777).
func newMemfd(name string, size int64) (int, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC)
	if err != nil {
		return -1, os.NewSyscallError("memfd_create", err)
	}
	if err := unix.Fchmod(fd, 0o600); err != nil {
		unix.Close(fd)
		return -1, os.NewSyscallError("fchmod", err)
	}
	if err := unix.Ftruncate(fd, size); err != nil {
		unix.Close(fd)
		return -1, os.NewSyscallError("ftruncate", err)
	}
	return fd, nil
}

// arena hands out page-aligned ranges of one memfd; Alloc'd regions are
// mappings of those ranges, and peers reach them through their own mapping
// of the whole file.
type arena struct {
	fd int

	mu   sync.Mutex
	free []span // sorted by off, coalesced
}

type span struct{ off, n uint64 }

func newArena() (*arena, error) {
	fd, err := newMemfd("gorun-shm-arena", arenaSize)
	if err != nil {
		return nil, err
	}
	return &arena{fd: fd, free: []span{{0, arenaSize}}}, nil
}

var errArenaFull = errors.New("shm arena exhausted")

// alloc maps n bytes (rounded up to pages) and returns the mapping, sliced
// to n, and its offset in the file. With node >= 0 the pages are placed on
// that NUMA node (MPOL_PREFERRED, as soft.MmapNode; shmem keeps the policy
// for every mapping of the range). The pages are then faulted in by this
// thread (MADV_POPULATE_WRITE, then mlock where the limit allows), so they
// land here rather than on the node of whichever peer touches them first,
// and the data path takes no page faults.
func (a *arena) alloc(n, node int) ([]byte, uint64, error) {
	size := uint64(soft.RoundPage(n))
	a.mu.Lock()
	off, ok := uint64(0), false
	for i, s := range a.free {
		if s.n >= size {
			off, ok = s.off, true
			a.free[i] = span{s.off + size, s.n - size}
			if a.free[i].n == 0 {
				a.free = append(a.free[:i], a.free[i+1:]...)
			}
			break
		}
	}
	a.mu.Unlock()
	if !ok {
		return nil, 0, errArenaFull
	}
	mem, err := unix.Mmap(a.fd, int64(off), int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		a.put(off, size)
		return nil, 0, os.NewSyscallError("mmap", err)
	}
	if node >= 0 {
		if err := numa.Mbind(mem, numa.PolicyPreferred, node); err != nil && !errors.Is(err, numa.ErrNotSupported) {
			unix.Munmap(mem)
			a.put(off, size)
			return nil, 0, err
		}
	}
	_ = unix.Madvise(mem, unix.MADV_DONTFORK)
	_ = unix.Madvise(mem, unix.MADV_POPULATE_WRITE) // Linux 5.14+; else first touch
	_ = unix.Mlock(mem)                             // best effort: RLIMIT_MEMLOCK is small for most users
	return mem[:n], off, nil
}

// release unmaps a region from alloc, frees its pages and its range.
func (a *arena) release(mem []byte, off uint64) error {
	size, err := a.unmap(mem, off)
	a.put(off, size)
	return err
}

// unmap unmaps a region from alloc and frees its pages, but keeps its range
// out of the free list (quarantine.go); it returns the range's size.
func (a *arena) unmap(mem []byte, off uint64) (uint64, error) {
	mem = mem[:cap(mem)]
	size := uint64(len(mem))
	err := unix.Munmap(mem)
	a.punch(off, size)
	if err != nil {
		return size, os.NewSyscallError("munmap", err)
	}
	return size, nil
}

// punch frees the pages of a range (a peer's later write faults fresh ones in).
func (a *arena) punch(off, n uint64) {
	_ = unix.Fallocate(a.fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, int64(off), int64(n))
}

func (a *arena) put(off, n uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	i := sort.Search(len(a.free), func(i int) bool { return a.free[i].off > off })
	a.free = append(a.free, span{})
	copy(a.free[i+1:], a.free[i:])
	a.free[i] = span{off, n}
	// Coalesce with the neighbours.
	if i+1 < len(a.free) && a.free[i].off+a.free[i].n == a.free[i+1].off {
		a.free[i].n += a.free[i+1].n
		a.free = append(a.free[:i+1], a.free[i+2:]...)
	}
	if i > 0 && a.free[i-1].off+a.free[i-1].n == a.free[i].off {
		a.free[i-1].n += a.free[i].n
		a.free = append(a.free[:i], a.free[i+1:]...)
	}
}

func (a *arena) close() {
	if a.fd >= 0 {
		unix.Close(a.fd)
		a.fd = -1
	}
}

// peerArenas holds this process's mappings of peers' arenas: one per
// arena file, shared by every connection to its device. Ranks of one
// process (comm.NewLocal) would otherwise map each other's arenas once per
// connection, n·(n-1) times arenaSize: 1.5 GiB for 4 ranks on a 32-bit
// platform, beyond its address space at 6.
var peerArenas = struct {
	sync.Mutex
	m map[arenaKey]*peerArena
}{m: map[arenaKey]*peerArena{}}

// arenaKey names an arena file. A memfd's inode stays unique while a
// mapping of it lives, and the table holds the mapping.
type arenaKey struct{ dev, ino uint64 }

// peerArena is a mapping of a peer's whole arena.
type peerArena struct {
	key  arenaKey
	mem  []byte
	refs int // guarded by peerArenas
}

// mapPeerArena returns the mapping of a peer's whole arena from fd (which
// it closes), mapping it if no connection of this process has; release
// gives it back.
func mapPeerArena(fd int) (*peerArena, error) {
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, os.NewSyscallError("fstat", err)
	}
	key := arenaKey{uint64(st.Dev), uint64(st.Ino)}
	peerArenas.Lock()
	defer peerArenas.Unlock()
	if a := peerArenas.m[key]; a != nil {
		a.refs++
		return a, nil
	}
	mem, err := unix.Mmap(fd, 0, int(st.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_NORESERVE)
	if err != nil {
		return nil, os.NewSyscallError("mmap", err)
	}
	_ = unix.Madvise(mem, unix.MADV_DONTFORK)
	a := &peerArena{key: key, mem: mem, refs: 1}
	peerArenas.m[key] = a
	return a, nil
}

// release drops a connection's hold on the mapping, unmapping it with the
// last one.
func (a *peerArena) release() {
	peerArenas.Lock()
	defer peerArenas.Unlock()
	if a.refs--; a.refs == 0 {
		delete(peerArenas.m, a.key)
		unix.Munmap(a.mem)
	}
}
