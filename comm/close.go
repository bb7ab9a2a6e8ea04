package comm

import (
	"context"
	"fmt"
	"sync"
)

// errNil is the cause of an operation's error on a nil *Comm.
var errNil = fmt.Errorf("%w: nil communicator", ErrInvalid)

// nilComm is the error of operation op called on a nil *Comm (Split's
// result for a negative color, say): it wraps ErrInvalid and names no
// rank. Every entry point that takes a *Comm returns it, or a Request
// that completed with it, rather than panic, as os.File's methods do on
// a nil *File.
func nilComm(op string) error { return &RankError{Rank: -1, Op: op, Err: errNil} }

// nilRequest is the Request of operation op started on a nil *Comm: it
// has completed with nilComm's error.
func nilRequest(op string) *Request {
	r := &Request{lazy: true, name: op, err: nilComm(op)}
	r.fin.Store(true)
	return r
}

// closing is the outcome of a communicator's Close: the first call starts
// the teardown on a goroutine of its own, every call waits for it or for
// the end of its own context.
type closing struct {
	once sync.Once
	done chan struct{} // closed when the teardown has ended
	err  error         // the teardown's result; read after done
}

// CloseContext releases the communicator, as Close, and returns when it
// has or when ctx ends, whichever comes first: a frozen or dead peer never
// holds it up for longer. The running operation, if any, fails with
// ErrClosed. Until ctx ends Close waits for its goodbyes to reach the
// peers (so that they see ErrPeerClosed rather than a failure); after
// that it skips them, and if ctx ends before the communicator's memory
// and sockets are released, it returns an error wrapping ctx's and the
// release finishes in the background. A later Close or CloseContext
// waits for the same teardown and returns its result.
func (c *Comm) CloseContext(ctx context.Context) error {
	if c == nil {
		return nilComm("close")
	}
	c.closing.once.Do(func() {
		done := make(chan struct{})
		c.closing.done = done
		if c.closed.Swap(true) { // Shrink or Grow took the transport over
			close(done)
			return
		}
		go func() {
			c.closing.err = c.teardown(ctx)
			close(done)
		}()
	})
	select {
	case <-c.closing.done:
		return c.closing.err
	case <-ctx.Done():
		select {
		case <-c.closing.done: // both: the teardown's result
			return c.closing.err
		default:
		}
		return &RankError{Rank: c.rank, Op: "close", Err: fmt.Errorf("%w (the release goes on in the background)", context.Cause(ctx))}
	}
}
