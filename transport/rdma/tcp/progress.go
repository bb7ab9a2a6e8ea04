package tcp

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"syscall"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// Progress is made by whoever asks: CQ.Poll and GetSendComp/GetRecvComp
// read and serve what has arrived on the caller's goroutine (progress), and
// a poster writes its own frames (writer.go). The watcher goroutine only
// sleeps in the netpoller until the socket is readable, then does the same
// work, so a conn whose owner is not polling still answers its peer, sees
// it hang up and completes requests (which wakes an armed CQ).
//
// Exactly one party reads a socket at a time: the holder of the read
// token. One that finds it taken asks the holder for another pass instead
// of waiting, so bytes never sit unread while a reader was wanted.

// token is a lock that is only ever tried: bit 0 is held, bit 1 asks the
// holder for one more pass before it lets go.
type token struct{ s atomic.Uint32 }

// acquire takes the token, or, when it is held, asks the holder for
// another pass and returns false.
func (t *token) acquire() bool {
	for {
		s := t.s.Load()
		if s == 0 {
			if t.s.CompareAndSwap(0, 1) {
				return true
			}
			continue
		}
		if s&2 != 0 || t.s.CompareAndSwap(s, s|2) {
			return false
		}
	}
}

// release lets the token go and returns false, or keeps it and returns
// true when another pass was asked for meanwhile.
func (t *token) release() bool {
	if t.s.CompareAndSwap(1, 0) {
		return false
	}
	t.s.Store(1)
	return true
}

// progress reads and serves what has arrived, unless someone else is
// (who then makes another pass). It never blocks.
func (c *conn) progress() {
	if !c.rtok.acquire() {
		return
	}
	for {
		c.readPass()
		if !c.rtok.release() {
			return
		}
	}
}

// readPass serves the frames that have arrived, then writes the responses
// they produced. Called with the read token.
func (c *conn) readPass() {
	if c.readExited {
		return
	}
	if c.failing.Load() {
		c.exitRead()
		return
	}
	c.drained = false
	err := c.parse()
	if c.wantFlush {
		c.wantFlush = false
		c.flush()
	}
	if err != nil {
		if errors.Is(err, errProtocol) {
			c.dev.counts.protocol.Add(1)
		}
		c.fail(err) // asks this holder for another pass, which exits
	}
}

// exitRead stops the read side for good: a region held by a payload in
// flight is released. Called with the read token.
func (c *conn) exitRead() {
	c.dropPayload()
	c.mu.Lock()
	c.exitReadLocked()
	c.mu.Unlock()
}

var errAgain = errors.New("no data yet")

// readSome reads what the socket holds into p without waiting: errAgain
// when it holds nothing, io.EOF when the peer has finished.
func (c *conn) readSome(p []byte) (int, error) {
	if c.rc == nil {
		return c.r.Read(p)
	}
	c.rbuf = p
	if err := c.rc.Control(c.readFn); err != nil {
		return 0, err
	}
	c.rbuf = nil
	return c.rn, c.rerr
}

func (c *conn) readFd(fd uintptr) {
	for {
		n, err := readRaw(int(fd), c.rbuf) // rawio.go
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			c.rn, c.rerr = 0, errAgain
		case err != nil:
			c.rn, c.rerr = 0, err
		case n == 0 && len(c.rbuf) > 0:
			c.rn, c.rerr = 0, io.EOF
		default:
			c.rn, c.rerr = n, nil
		}
		return
	}
}

// peerGone reports whether the peer has closed or reset the socket even
// though unread bytes may precede the end. A receiver-not-ready wait asks,
// since it leaves the stream unread.
func (c *conn) peerGone() bool {
	if c.rc == nil {
		return false
	}
	c.gone = false
	if err := c.rc.Control(c.goneFn); err != nil {
		return true
	}
	return c.gone
}

// watch sleeps in the netpoller until the socket is readable, then makes
// progress; it ends when the socket closes.
func (c *conn) watch() {
	defer close(c.watchDone)
	for !c.failing.Load() {
		if err := c.rc.Read(c.watchFn); err != nil {
			c.fail(err)
		}
	}
}

// watchFd is the watcher's read callback: false sends it back to sleep
// until more bytes arrive. A pass that stops short of the socket's end (a
// receiver-not-ready wait) is resumed by a posted receive or the RNR
// timer, not by the watcher.
func (c *conn) watchFd(uintptr) bool {
	if c.failing.Load() {
		return true
	}
	c.progress()
	return c.failing.Load()
}

// getComp returns q's next completion, making progress on the caller's
// goroutine and sleeping (Arm, then Notify) when there is none.
func (c *conn) getComp(ctx context.Context, q *cq) (rdma.WC, error) {
	if !q.private {
		return rdma.WaitComp(ctx, q, q.Closed())
	}
	for {
		for range 2 {
			c.resume()
			c.progress()
			if wc, ok, err := q.Next(); ok {
				return wc, nil
			} else if err != nil {
				return rdma.WC{}, err
			}
			q.Arm()
		}
		select {
		case <-q.Notify():
		case <-ctx.Done():
			return rdma.WC{}, ctx.Err()
		}
	}
}
