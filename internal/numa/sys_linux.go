package numa

import (
	"errors"
	"fmt"
	"math/bits"
	"os"
	"runtime"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	mpolFNode = 1 << 0 // MPOL_F_NODE
	mpolFAddr = 1 << 1 // MPOL_F_ADDR
	maxNodes  = 1024   // nodemask bits we pass
)

// sysErr wraps an errno; ENOSYS and EPERM (what seccomp sandboxes return)
// also match ErrNotSupported.
func sysErr(op string, arg any, errno error) error {
	if errors.Is(errno, unix.ENOSYS) || errors.Is(errno, unix.EPERM) {
		errno = errors.Join(ErrNotSupported, errno)
	}
	return opErr(op, arg, errno)
}

func nodeMask(nodes []int) ([maxNodes / 64]uint64, error) {
	var m [maxNodes / 64]uint64
	for _, n := range nodes {
		if n < 0 || n >= maxNodes {
			return m, ErrInvalid
		}
		m[n/64] |= 1 << (n % 64)
	}
	return m, nil
}

// Mbind sets the memory policy of b, which must start on a page boundary,
// to mode over nodes. Call it before the memory is first touched: pages
// already present stay where they are. PolicyDefault and PolicyLocal take
// no nodes.
func Mbind(b []byte, mode Policy, nodes ...int) error {
	if len(b) == 0 {
		return nil
	}
	addr := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	if addr%uintptr(os.Getpagesize()) != 0 {
		return opErr("mbind", "unaligned address", ErrInvalid)
	}
	mask, err := nodeMask(nodes)
	if err != nil {
		return opErr("mbind", "nodes "+fmt.Sprint(nodes), err)
	}
	var mp, maxnode uintptr
	if len(nodes) > 0 {
		mp, maxnode = uintptr(unsafe.Pointer(&mask[0])), maxNodes+1 // the kernel counts maxnode-1 bits
	}
	_, _, e := unix.Syscall6(unix.SYS_MBIND, addr, uintptr(len(b)), uintptr(mode), mp, maxnode, 0)
	runtime.KeepAlive(&mask)
	if e != 0 {
		return sysErr("mbind", "nodes "+FormatCPUList(nodes), e)
	}
	return nil
}

// SetThreadPolicy sets the calling OS thread's memory policy (set_mempolicy),
// which applies to memory it touches first. Lock the goroutine to its
// thread (runtime.LockOSThread) for this to mean anything.
func SetThreadPolicy(mode Policy, nodes ...int) error {
	mask, err := nodeMask(nodes)
	if err != nil {
		return opErr("set_mempolicy", "nodes "+fmt.Sprint(nodes), err)
	}
	var mp, maxnode uintptr
	if len(nodes) > 0 {
		mp, maxnode = uintptr(unsafe.Pointer(&mask[0])), maxNodes+1
	}
	_, _, e := unix.Syscall(unix.SYS_SET_MEMPOLICY, uintptr(mode), mp, maxnode)
	runtime.KeepAlive(&mask)
	if e != 0 {
		return sysErr("set_mempolicy", "nodes "+FormatCPUList(nodes), e)
	}
	return nil
}

// PolicyOf returns the memory policy that covers p and its nodes
// (get_mempolicy with MPOL_F_ADDR).
func PolicyOf(p unsafe.Pointer) (Policy, []int, error) {
	var mode int32
	var mask [maxNodes / 64]uint64
	_, _, e := unix.Syscall6(unix.SYS_GET_MEMPOLICY, uintptr(unsafe.Pointer(&mode)),
		uintptr(unsafe.Pointer(&mask[0])), maxNodes, uintptr(p), mpolFAddr, 0)
	if e != 0 {
		return 0, nil, sysErr("get_mempolicy", p, e)
	}
	var nodes []int
	for w, m := range mask {
		for m != 0 {
			i := bits.TrailingZeros64(m)
			nodes = append(nodes, w*64+i)
			m &^= 1 << i
		}
	}
	return Policy(mode), nodes, nil
}

// NodeOfAddr returns the node holding the page at p, faulting it in if it
// is not present (get_mempolicy with MPOL_F_NODE|MPOL_F_ADDR).
func NodeOfAddr(p unsafe.Pointer) (int, error) {
	var node int32
	_, _, e := unix.Syscall6(unix.SYS_GET_MEMPOLICY, uintptr(unsafe.Pointer(&node)), 0, 0,
		uintptr(p), mpolFNode|mpolFAddr, 0)
	if e != 0 {
		return -1, sysErr("get_mempolicy", p, e)
	}
	return int(node), nil
}

// Lock keeps b in RAM (mlock). Unprivileged processes have a small
// RLIMIT_MEMLOCK; the error then wraps ENOMEM or EPERM.
func Lock(b []byte) error {
	if err := unix.Mlock(b); err != nil {
		return opErr("mlock", len(b), err)
	}
	return nil
}

// DontFork keeps b out of child processes (MADV_DONTFORK), as memory a
// device may write must be: a fork would otherwise make its pages
// copy-on-write under the device's feet.
func DontFork(b []byte) error {
	if err := unix.Madvise(b, unix.MADV_DONTFORK); err != nil {
		return opErr("madvise", "MADV_DONTFORK", err)
	}
	return nil
}

func cpuSet(cpus []int) (*unix.CPUSet, error) {
	var s unix.CPUSet
	for _, c := range cpus {
		if c < 0 || c >= len(s)*64 {
			return nil, ErrInvalid
		}
		s.Set(c)
	}
	if len(cpus) == 0 {
		return nil, ErrInvalid
	}
	return &s, nil
}

func fromSet(s *unix.CPUSet) []int {
	var out []int
	for c := 0; c < len(s)*64; c++ {
		if s.IsSet(c) {
			out = append(out, c)
		}
	}
	return out
}

// BindThread locks the calling goroutine to its OS thread
// (runtime.LockOSThread) and restricts that thread to cpus. The goroutine
// stays locked: call runtime.UnlockOSThread only after restoring the old
// affinity, or let the goroutine exit, which ends the thread. On error the
// goroutine is unlocked and the affinity unchanged.
func BindThread(cpus []int) error {
	set, err := cpuSet(cpus)
	if err != nil {
		return opErr("bind thread", FormatCPUList(cpus), err)
	}
	runtime.LockOSThread()
	if err := unix.SchedSetaffinity(0, set); err != nil {
		runtime.UnlockOSThread()
		return sysErr("sched_setaffinity", FormatCPUList(cpus), err)
	}
	return nil
}

// ThreadAffinity returns the CPUs the calling OS thread may run on.
func ThreadAffinity() ([]int, error) { return Affinity(0) }

// Affinity returns the CPUs thread (or process) tid may run on; 0 is the
// calling thread.
func Affinity(tid int) ([]int, error) {
	var s unix.CPUSet
	if err := unix.SchedGetaffinity(tid, &s); err != nil {
		return nil, sysErr("sched_getaffinity", tid, err)
	}
	return fromSet(&s), nil
}

// BindProcess restricts every thread of this process to cpus; threads
// created later inherit it from their creator. The launcher's ranks call it
// at start-up for --bind-to.
func BindProcess(cpus []int) error {
	set, err := cpuSet(cpus)
	if err != nil {
		return opErr("bind process", FormatCPUList(cpus), err)
	}
	// Repeat until no new thread appeared: the runtime may start one while
	// we walk the list.
	done := map[int]bool{}
	for range 10 {
		ents, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return opErr("bind process", "/proc/self/task", err)
		}
		fresh := false
		for _, e := range ents {
			tid, err := strconv.Atoi(e.Name())
			if err != nil || done[tid] {
				continue
			}
			fresh = true
			if err := unix.SchedSetaffinity(tid, set); err != nil && !errors.Is(err, unix.ESRCH) {
				return sysErr("sched_setaffinity", tid, err)
			}
			done[tid] = true
		}
		if !fresh {
			return nil
		}
	}
	return nil
}

// CurrentCPU returns the CPU the calling thread is running on (getcpu);
// without BindThread the answer may be stale at once.
func CurrentCPU() (int, error) {
	cpu, _, err := getcpu()
	return cpu, err
}

// CurrentNode returns the NUMA node of the CPU the calling thread is
// running on.
func CurrentNode() (int, error) {
	_, node, err := getcpu()
	return node, err
}

func getcpu() (cpu, node int, err error) {
	var c, n uint32
	_, _, e := unix.RawSyscall(unix.SYS_GETCPU, uintptr(unsafe.Pointer(&c)), uintptr(unsafe.Pointer(&n)), 0)
	if e != 0 {
		return -1, -1, sysErr("getcpu", "", e)
	}
	return int(c), int(n), nil
}
