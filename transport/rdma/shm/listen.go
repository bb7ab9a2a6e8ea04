//go:build linux

package shm

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// socketDir is the private directory that holds the listeners' sockets:
// $XDG_RUNTIME_DIR/gorun if that is set and usable, else
// $TMPDIR/gorun-<uid>. It is created 0700 and rejected if it is a symlink,
// is owned by another user or is open to group or others.
func socketDir() (string, error) {
	var dirs []string
	if x := os.Getenv("XDG_RUNTIME_DIR"); x != "" {
		dirs = append(dirs, filepath.Join(x, "gorun"))
	}
	dirs = append(dirs, filepath.Join(os.TempDir(), fmt.Sprintf("gorun-%d", os.Getuid())))
	var first error
	for _, dir := range dirs {
		err := privateDir(dir)
		if err == nil {
			return dir, nil
		}
		if first == nil {
			first = err
		}
	}
	return "", first
}

func privateDir(dir string) error {
	if err := os.Mkdir(dir, 0o700); err != nil && !os.IsExist(err) {
		return err
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || fi.Mode()&os.ModeSymlink != 0 || !ok || int(st.Uid) != os.Getuid() {
		return fmt.Errorf("socket directory %s is not a directory owned by uid %d", dir, os.Getuid())
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("socket directory %s has mode %v, want 0700", dir, fi.Mode().Perm())
	}
	return nil
}

// socketPath maps a Listen address to a socket path: an absolute path is
// used as given; anything else ("127.0.0.1:0") gets a fresh name in the
// private directory.
func socketPath(addr string) (string, error) {
	if strings.HasPrefix(addr, "/") {
		return addr, nil
	}
	dir, err := socketDir()
	if err != nil {
		return "", err
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return filepath.Join(dir, fmt.Sprintf("shm-%d-%s.sock", os.Getpid(), hex.EncodeToString(b[:]))), nil
}

// listener accepts sockets and runs each handshake in the background, so
// that a Dial completes without waiting for Accept (as a TCP connect
// completes into the backlog): a rank may dial its successor before it
// accepts its predecessor.
type listener struct {
	dev  *Device
	ln   *net.UnixListener
	addr *net.UnixAddr

	results chan acceptResult // established connections and failed handshakes
	ctx     context.Context   // ends with Close
	cancel  context.CancelFunc
	once    sync.Once
	wg      sync.WaitGroup
}

type acceptResult struct {
	c   *conn
	err error
}

// handshakeTimeout bounds a background handshake: a peer that connects and
// stalls must not hold a goroutine for long.
const handshakeTimeout = 30 * time.Second

func (d *Device) listen(_ context.Context, addr string) (*listener, error) {
	path, err := socketPath(addr)
	if err != nil {
		return nil, rdma.NewOpError(provider, "listen", err)
	}
	ua := &net.UnixAddr{Name: path, Net: "unix"}
	ln, err := net.ListenUnix("unix", ua)
	if err != nil {
		return nil, rdma.NewOpError(provider, "listen", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, rdma.NewOpError(provider, "listen", err)
	}
	l := &listener{dev: d, ln: ln, addr: ua, results: make(chan acceptResult, 64)}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		ln.Close()
		return nil, rdma.NewOpError(provider, "listen", rdma.ErrClosed)
	}
	d.listeners[l] = struct{}{}
	d.mu.Unlock()
	l.wg.Add(1)
	go l.acceptLoop()
	return l, nil
}

// acceptLoop accepts sockets until Close and hands each to a handshake.
func (l *listener) acceptLoop() {
	defer l.wg.Done()
	for {
		uc, err := l.ln.AcceptUnix()
		if err != nil {
			if l.ctx.Err() != nil {
				return
			}
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				continue
			}
			l.deliver(acceptResult{err: err})
			return
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			ctx, cancel := context.WithTimeout(l.ctx, handshakeTimeout)
			defer cancel()
			c, err := l.dev.handshake(ctx, uc, false)
			if err != nil && l.ctx.Err() != nil {
				return // closing
			}
			l.deliver(acceptResult{c, err})
		}()
	}
}

// deliver queues r for Accept, or drops it when the listener closes.
func (l *listener) deliver(r acceptResult) {
	select {
	case l.results <- r:
	case <-l.ctx.Done():
		if r.c != nil {
			r.c.Close()
		}
	}
}

// Accept returns the next established connection, or the error of a
// failed handshake (a bad token is rdma.ErrAuth), as tcp's does.
func (l *listener) Accept(ctx context.Context) (rdma.Conn, error) {
	c, err := l.accept(ctx)
	if err != nil {
		return nil, err
	}
	return c, nil
}

func (l *listener) accept(ctx context.Context) (*conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, rdma.NewOpError(provider, "accept", err)
	}
	select {
	case r := <-l.results:
		if r.err != nil {
			return nil, rdma.NewOpError(provider, "accept", r.err)
		}
		return r.c, nil
	case <-l.ctx.Done():
		return nil, rdma.NewOpError(provider, "accept", rdma.ErrClosed)
	case <-ctx.Done():
		return nil, rdma.NewOpError(provider, "accept", ctx.Err())
	}
}

func (l *listener) Addr() net.Addr { return l.addr }

// Close stops accepting, closes the connections not yet accepted and
// removes the socket file.
func (l *listener) Close() error {
	var err error
	l.once.Do(func() {
		l.cancel()
		err = l.ln.Close() // unlinks the socket
		l.wg.Wait()
		for {
			select {
			case r := <-l.results:
				if r.c != nil {
					r.c.Close()
				}
				continue
			default:
			}
			break
		}
		l.dev.mu.Lock()
		delete(l.dev.listeners, l)
		l.dev.mu.Unlock()
	})
	return err
}

func (d *Device) dial(ctx context.Context, addr string) (*conn, error) {
	var nd net.Dialer
	nc, err := nd.DialContext(ctx, "unix", addr)
	if err != nil {
		return nil, rdma.NewOpError(provider, "dial", err)
	}
	c, err := d.handshake(ctx, nc.(*net.UnixConn), true)
	if err != nil {
		if ctxErr(ctx, err) != nil {
			return nil, rdma.NewOpError(provider, "dial", ctx.Err())
		}
		return nil, rdma.NewOpError(provider, "dial", err)
	}
	return c, nil
}

// ctxErr reports ctx's error if err is the socket deadline that mirrors
// ctx's deadline (the socket can time out a moment before ctx does).
func ctxErr(ctx context.Context, err error) error {
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		if dl, ok := ctx.Deadline(); ok {
			select {
			case <-ctx.Done():
			case <-time.After(time.Until(dl) + 100*time.Millisecond):
			}
		}
	}
	return ctx.Err()
}
