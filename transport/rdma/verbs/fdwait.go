//go:build linux && cgo && rdma

package verbs

import (
	"context"
	"errors"
	"os"
	"syscall"
	"time"
)

// fdWaiter sleeps on a non-blocking descriptor owned by C (a completion or
// event channel) through the Go netpoller, so a waiting goroutine holds no
// OS thread. It polls a dup of the descriptor: the dup shares the open file
// description (and its readiness), and closing it leaves the C library's
// descriptor alone.
type fdWaiter struct {
	f   *os.File
	raw syscall.RawConn
}

func newFDWaiter(fd int, name string) (*fdWaiter, error) {
	nfd, err := syscall.Dup(fd)
	if err != nil {
		return nil, os.NewSyscallError("dup", err)
	}
	syscall.CloseOnExec(nfd)
	if err := syscall.SetNonblock(nfd, true); err != nil {
		syscall.Close(nfd)
		return nil, os.NewSyscallError("fcntl", err)
	}
	f := os.NewFile(uintptr(nfd), name)
	raw, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &fdWaiter{f: f, raw: raw}, nil
}

// errKicked reports a wake-up by kick: the caller re-checks its state.
var errKicked = errors.New("kicked")

// wait calls try until it reports done, sleeping for readability between
// calls. try must return done=false only when the descriptor would block.
// wait returns ctx's error when ctx ends, errKicked after kick, and
// os.ErrClosed after close.
func (w *fdWaiter) wait(ctx context.Context, try func() (done bool)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, w.kick)
	defer stop()
	err := w.raw.Read(func(uintptr) bool { return try() })
	if err == nil {
		return nil
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		_ = w.f.SetReadDeadline(time.Time{})
		if err := ctx.Err(); err != nil {
			return err
		}
		return errKicked
	}
	return os.ErrClosed
}

// kick wakes the current (or next) wait with errKicked.
func (w *fdWaiter) kick() { _ = w.f.SetReadDeadline(time.Unix(1, 0)) }

// close wakes every waiter and returns once none is inside try.
func (w *fdWaiter) close() { _ = w.f.Close() }
