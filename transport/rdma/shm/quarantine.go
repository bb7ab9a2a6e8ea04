//go:build linux

package shm

import (
	"golang.org/x/sys/unix"
)

// A peer stopped (SIGSTOP, a debugger) in the middle of a memcpy into our
// arena finishes that memcpy when it resumes, however long after: nothing
// can take our arena back out of its address space. The key table's users
// counters and the receive fence tell when it may be in one (waitZero gives
// up on it); the region it may still write is then tainted, and when the
// region is freed its pages are punched out but its range is quarantined:
// kept out of the allocator until every such peer's process has exited
// (its pidfd polls readable; the kernel tears down a process's mappings
// before it reports the exit). Without that, a survivor of a shrink that
// reuses the range for a new link's buffer would read the resumed peer's
// stale bytes as a new message. Without a pidfd (kernels before 5.3) the
// range stays out for the device's life.

// quarantined is an arena range that frozen peers may still write.
type quarantined struct {
	off, n uint64
	pidfds []int // one per peer, -1 if unknown (kept for ever)
}

// taint notes that c's peer, found frozen in a copy into info's memory, may
// still write it. Registered Go memory needs nothing: a process_vm_writev
// ends before a stop takes effect. It takes only qmu (callers hold
// Device.mu or c's rqMu).
func (d *Device) taint(info *mrInfo, c *conn) {
	if info == nil || info.mem == nil {
		return
	}
	fd := -1
	if c.pidfd >= 0 {
		if nfd, err := unix.FcntlInt(uintptr(c.pidfd), unix.F_DUPFD_CLOEXEC, 0); err == nil {
			fd = nfd
		}
	}
	d.qmu.Lock()
	info.frozen = append(info.frozen, fd)
	d.qmu.Unlock()
}

// releaseArena frees the arena memory of a deregistered region: back to the
// allocator, or, if tainted, into quarantine.
func (d *Device) releaseArena(info *mrInfo) error {
	d.qmu.Lock()
	frozen := info.frozen
	info.frozen = nil
	d.qmu.Unlock()
	if len(frozen) == 0 {
		return d.arena.release(info.mem, info.off)
	}
	n, err := d.arena.unmap(info.mem, info.off)
	d.qmu.Lock()
	d.quarantine = append(d.quarantine, quarantined{off: info.off, n: n, pidfds: frozen})
	d.qmu.Unlock()
	return err
}

// reap returns to the allocator the quarantined ranges whose peers have all
// exited, punching their pages out again (a resumed peer's copy may have
// faulted some back in).
func (d *Device) reap() {
	d.qmu.Lock()
	defer d.qmu.Unlock()
	keep := d.quarantine[:0]
	for _, q := range d.quarantine {
		if !allExited(q.pidfds) {
			keep = append(keep, q)
			continue
		}
		closeAll(q.pidfds)
		d.arena.punch(q.off, q.n)
		d.arena.put(q.off, q.n)
	}
	clear(d.quarantine[len(keep):])
	d.quarantine = keep
}

// dropQuarantine closes the quarantine's pidfds (Device.Close).
func (d *Device) dropQuarantine() {
	d.qmu.Lock()
	defer d.qmu.Unlock()
	for _, q := range d.quarantine {
		closeAll(q.pidfds)
	}
	d.quarantine = nil
}

// allExited reports whether every pidfd's process has exited.
func allExited(pidfds []int) bool {
	for _, fd := range pidfds {
		if fd < 0 || !exited(fd) {
			return false
		}
	}
	return true
}

// exited reports whether the process of pidfd has exited (it polls
// readable).
func exited(pidfd int) bool {
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n == 1 && fds[0].Revents&unix.POLLIN != 0
}

func closeAll(fds []int) {
	for _, fd := range fds {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}
