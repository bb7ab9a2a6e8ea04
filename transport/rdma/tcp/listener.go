package tcp

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// A listener accepts sockets in its own goroutine and authenticates each in
// another, so a slow or hostile client holds neither Accept nor other
// clients; Accept takes finished handshakes in arrival order. At most
// maxHandshakes run at once, and each is bounded by handshakeTimeout.
const maxHandshakes = 64

type acceptResult struct {
	c   *conn
	err error
}

type listener struct {
	dev     *device
	ln      *net.TCPListener
	results chan acceptResult
	sem     chan struct{} // one token per running handshake
	ctx     context.Context
	cancel  context.CancelFunc // ends running handshakes on Close
	once    sync.Once
	wg      sync.WaitGroup
}

func newListener(d *device, ln *net.TCPListener) *listener {
	ctx, cancel := context.WithCancel(context.Background())
	return &listener{
		dev: d, ln: ln, ctx: ctx, cancel: cancel,
		results: make(chan acceptResult),
		sem:     make(chan struct{}, maxHandshakes),
	}
}

func (l *listener) start() {
	l.wg.Add(1)
	go l.acceptLoop()
}

func (l *listener) Addr() net.Addr { return l.ln.Addr() }

func (l *listener) acceptLoop() {
	defer l.wg.Done()
	for {
		select {
		case l.sem <- struct{}{}:
		case <-l.ctx.Done():
			return
		}
		nc, err := l.ln.AcceptTCP()
		if err != nil {
			<-l.sem
			if errors.Is(err, net.ErrClosed) || l.ctx.Err() != nil {
				return
			}
			// Out of descriptors and the like: report it, back off.
			l.deliver(acceptResult{err: err})
			select {
			case <-time.After(5 * time.Millisecond):
			case <-l.ctx.Done():
				return
			}
			continue
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			c, err := l.dev.setup(l.ctx, nc, roleAccept)
			<-l.sem
			l.deliver(acceptResult{c, err})
		}()
	}
}

// deliver hands r to an Accept, or closes its conn if the listener closes
// first.
func (l *listener) deliver(r acceptResult) {
	select {
	case l.results <- r:
	case <-l.ctx.Done():
		if r.c != nil {
			r.c.Close()
		}
	}
}

// AcceptQP returns the next authenticated connection, started with the
// completion queues of init. A peer that failed the handshake makes it
// return that error (wrapping ErrAuth); the listener stays open. A conn
// reads nothing before it is accepted: what its peer sends waits in the
// socket.
func (l *listener) AcceptQP(ctx context.Context, init rdma.QPInit) (rdma.Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, opErr("accept", err)
	}
	if err := l.dev.checkInit(init); err != nil {
		return nil, opErr("accept", err)
	}
	select {
	case r := <-l.results:
		if r.err != nil {
			return nil, opErr("accept", r.err)
		}
		r.c.start(init)
		return r.c, nil
	case <-ctx.Done():
		return nil, opErr("accept", ctx.Err())
	case <-l.ctx.Done():
		return nil, opErr("accept", rdma.ErrClosed)
	}
}

// Close stops accepting, ends running handshakes and closes connections
// that were authenticated but not yet accepted.
func (l *listener) Close() error {
	var err error
	l.once.Do(func() {
		l.cancel()
		err = l.ln.Close()
		l.wg.Wait()
		l.dev.mu.Lock()
		delete(l.dev.lns, l)
		l.dev.mu.Unlock()
	})
	if err != nil {
		return opErr("listener_close", err)
	}
	return nil
}
