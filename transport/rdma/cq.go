package rdma

import (
	"context"
	"errors"
)

// Progress: the caller polls.
//
// GetSendComp and GetRecvComp block, as rdma_get_send_comp does. Under them
// verbs has three things, and so does this package:
//
//   - CQ.Poll never blocks: it returns the completions that are ready, or
//     none (ibv_poll_cq). On providers that need a CPU to make completions
//     (shm drains its peers' rings, tcp reads its sockets) Poll does that
//     work itself, on the caller's goroutine: no goroutine hand-off sits
//     between a peer's message and the caller that polls for it.
//   - CQ.Arm, then a receive from CQ.Notify, is how a poller sleeps without
//     losing a wake-up (ibv_req_notify_cq plus the completion channel's fd).
//     After Arm, the next completion that reaches the queue sends one token
//     on Notify's channel. A completion that reached the queue before Arm
//     may not, so a poller that found nothing does Arm, Poll once more, and
//     only then waits on Notify (the usual verbs pattern). Tokens may be
//     stale: a waker always polls, and arms again before the next wait.
//   - A CQ is shared by the connections that name it in QPInit when they
//     are made (ibv_create_cq, then ibv_qp_init_attr's send_cq and recv_cq),
//     so a caller with many peers polls one place. Each connection's
//     completions reach it in that connection's post order (sends among
//     sends, receives among receives); completions of different connections
//     interleave in any order. Completions carry no connection: callers tell
//     them apart by wrid, as verbs callers usually do.
//
// When a connection bound to a CQ fails or is closed, every request it still
// has outstanding completes there with a non-success status (StatusFlushed
// for those that never ran), as an RC queue pair in the error state flushes
// its queues: a caller learns of a dead peer from its flushed receives.
// GetSendComp and GetRecvComp on a queue bound to a CQ return that CQ's next
// completion, of either kind when both queues share it (rdma_get_send_comp
// polls the QP's send_cq, whatever else completes there); their error is
// non-nil only when ctx ends or the CQ is closed or failed.
//
// A CQ can fail: a verbs CQ that overran lost completions
// (IBV_EVENT_CQ_ERR), and a device that died fails all of its CQs. Its
// connections fail with it, and it gives no completions but those it
// already holds (their flushes among them). Err then says why, once
// those can be polled, and the CQ sends a token on Notify, and one at
// once for every Arm from then on, so that no sleeper is left waiting for
// a completion that will not come. A poller that wakes to a token and
// polls nothing checks Err (a stale token and a failure look alike
// there), and when it is set polls once more for what came in between;
// a poller that keeps arming a failed CQ spins. Providers whose queues
// grow and never lose a completion (mem, shm, tcp) never fail one.

// CQ is a completion queue that connections of one device share.
// Poll, Arm and Notify may be called from any goroutine; completions are
// handed out once each, so callers that poll from several goroutines must
// agree among themselves who handles what (engine.Engine holds a lock).
type CQ interface {
	// Poll moves up to len(wcs) ready completions into wcs, in order, and
	// returns how many. It never blocks, and allocates nothing.
	Poll(wcs []WC) int
	// Arm requests one token on Notify for the next completion that
	// reaches the queue.
	Arm()
	// Notify is the channel tokens arrive on (capacity one).
	Notify() <-chan struct{}
	// Err reports why the queue failed (see above), or nil. A queue that
	// was closed has not failed.
	Err() error
	// Close releases the queue. Connections bound to it must be closed
	// first; a Poll after Close returns 0, and Notify gets a token so that a
	// sleeper wakes up.
	Close() error
}

// QPInit names the completion queues of a new connection (ibv_qp_init_attr).
// A nil CQ gives the queue a private one, read with GetSendComp or
// GetRecvComp. Both may name the same CQ; it must come from the same device.
type QPInit struct {
	SendCQ CQ
	RecvCQ CQ
}

// ErrCQClosed is returned by WaitComp when its CQ has been closed.
var ErrCQClosed = errors.New("completion queue closed")

// WaitComp returns cq's next completion, polling, then arming and sleeping
// until one comes, ctx ends, closed (if not nil) is closed, or cq fails
// (then its error, once the completions it holds are taken). Providers
// use it for GetSendComp and GetRecvComp on a queue bound to a shared CQ.
func WaitComp(ctx context.Context, cq CQ, closed <-chan struct{}) (WC, error) {
	var wc [1]WC
	for {
		if cq.Poll(wc[:]) == 1 {
			return wc[0], nil
		}
		cq.Arm()
		if cq.Poll(wc[:]) == 1 {
			return wc[0], nil
		}
		select {
		case <-cq.Notify():
			// A token that brings nothing is stale, or says the queue
			// failed: its Arm would hand out tokens at once.
			if cq.Poll(wc[:]) == 1 {
				return wc[0], nil
			}
			if err := cq.Err(); err != nil {
				if cq.Poll(wc[:]) == 1 { // it failed after the poll above
					return wc[0], nil
				}
				return WC{}, err
			}
		case <-ctx.Done():
			return WC{}, ctx.Err()
		case <-closed:
			if cq.Poll(wc[:]) == 1 {
				return wc[0], nil
			}
			return WC{}, ErrCQClosed
		}
	}
}
