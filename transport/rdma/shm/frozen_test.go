//go:build linux

package shm

import (
	"os/exec"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// waitZero on a count a peer holds up: it returns true once the count drops
// or the peer exits, and gives up (false, the conn in the error state) on
// a peer frozen (SIGSTOP) for frozenPeerAfter instead of waiting for ever
// (then, on a live conn, it also moves the conn to the error state).
// The "peer" is a child process; the count is held up by the test.
func TestWaitZeroFrozenPeer(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Skip("no sleep binary:", err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	pid := cmd.Process.Pid
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		t.Skip("no pidfd:", err)
	}
	defer unix.Close(fd)
	c := &conn{peerPid: pid, pidfd: fd}
	c.state.Store(stateError) // no segments here to wake: markError leaves it
	var users atomic.Uint32

	// A live peer finishing its copy.
	users.Store(1)
	go func() { time.Sleep(10 * time.Millisecond); users.Store(0) }()
	if !c.waitZero(&users) {
		t.Fatal("gave up on a live peer")
	}

	// A frozen one.
	users.Store(1)
	cmd.Process.Signal(syscall.SIGSTOP)
	start := time.Now()
	if c.waitZero(&users) {
		t.Fatal("a frozen peer's count reported zero")
	}
	if d := time.Since(start); d < frozenPeerAfter {
		t.Fatalf("gave up after %v, before frozenPeerAfter", d)
	}

	// A dead one ends the wait at once.
	cmd.Process.Kill()
	cmd.Wait()
	if !c.waitZero(&users) {
		t.Fatal("a dead peer's wait did not end")
	}
}
