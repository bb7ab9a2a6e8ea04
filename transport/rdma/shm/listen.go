//go:build linux

package shm

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// socketPath maps a Listen address to a socket address: an absolute path
// is used as given, as is "@name" (Linux's abstract namespace); anything
// else ("127.0.0.1:0") gets a fresh abstract name, "@gorun-shm-PID-RANDOM".
// An abstract socket is no file: it goes when its last descriptor closes,
// so a job killed with SIGKILL leaves nothing behind. It has no file
// permissions either; the handshake checks the peer's uid (SO_PEERCRED)
// on both sides, and its token.
func socketPath(addr string) (string, error) {
	if strings.HasPrefix(addr, "/") || strings.HasPrefix(addr, "@") {
		return addr, nil
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return fmt.Sprintf("@gorun-shm-%d-%s", os.Getpid(), hex.EncodeToString(b[:])), nil
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
	if !strings.HasPrefix(path, "@") {
		if err := os.Chmod(path, 0o600); err != nil {
			ln.Close()
			return nil, rdma.NewOpError(provider, "listen", err)
		}
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
