package comm

import (
	"context"
	"fmt"
	"sync"
)

// errNilComm is Close's error on a nil *Comm.
var errNilComm = &RankError{Rank: -1, Op: "close", Err: fmt.Errorf("%w: nil communicator", ErrInvalid)}

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
		return errNilComm
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
