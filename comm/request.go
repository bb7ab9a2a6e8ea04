package comm

import "context"

// Request is a pending non-blocking operation. Its place in the
// communicator's operation order is fixed when it is started.
type Request struct {
	done chan struct{}
	err  error
}

// Wait blocks until the operation completes or ctx ends (the operation
// itself is bounded by the context given when it started).
func (r *Request) Wait(ctx context.Context) error {
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Test reports whether the operation has completed, and its error.
func (r *Request) Test() (done bool, err error) {
	select {
	case <-r.done:
		return true, r.err
	default:
		return false, nil
	}
}

func start(f func() error) *Request {
	r := &Request{done: make(chan struct{})}
	go func() {
		r.err = f()
		close(r.done)
	}()
	return r
}

// IAllReduce starts AllReduce; the buffers must not be touched until the
// request completes.
func IAllReduce[T Number](ctx context.Context, c *Comm, send, recv []T, op Op) *Request {
	t := c.ticket()
	return start(func() error { return allReduce(ctx, c, t, send, recv, op) })
}

// IBroadcast starts Broadcast.
func IBroadcast[T Number](ctx context.Context, c *Comm, buf []T, root int) *Request {
	t := c.ticket()
	return start(func() error { return broadcast(ctx, c, t, buf, root) })
}

// IAllGather starts AllGather.
func IAllGather[T Number](ctx context.Context, c *Comm, send, recv []T) *Request {
	t := c.ticket()
	return start(func() error { return allGather(ctx, c, t, send, recv) })
}

// IReduceScatter starts ReduceScatter.
func IReduceScatter[T Number](ctx context.Context, c *Comm, send, recv []T, op Op) *Request {
	t := c.ticket()
	return start(func() error { return reduceScatter(ctx, c, t, send, recv, op) })
}
