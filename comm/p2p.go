package comm

// Non-blocking point-to-point messages run as groups, as NCCL's
// ncclGroupStart/ncclGroupEnd run theirs, but without the brackets.
//
// An ISend or IRecv does not take its turn when it is started: it waits,
// with the others started after it, until something needs it to run: a
// Wait or Test on any request, WaitAll, a blocking Send or Recv (which
// joins the group), or any other operation started on the communicator
// (which runs after the group, in the order the calls were made). The
// waiting messages then run as one call in the engine, every message a
// separate chain of pieces, so that their sends and receives progress
// together: two ranks that each ISend the other a large message before
// their IRecv complete, however large it is and however many are
// outstanding. Each message carries its own signature (tag, length,
// element type and per-pair sequence number) and is cut into the same
// pieces as on its own, so on the wire a group is exactly the messages it
// holds: a peer that runs them one at a time, or grouped differently, is
// its match.
//
// Messages from a rank to itself never reach the engine: the group's k-th
// send to itself is copied into its k-th receive from itself, before the
// others run. One without its counterpart in the group could never
// complete (the group runs to its end before anything started after it),
// so it is ErrInvalid.
//
// A group of one message runs as Send or Recv does. A group with several
// sends gathers them into one staging buffer first, and one with several
// receives scatters from one after (the engine moves one input and one
// output buffer per call); one send and one receive use the caller's
// buffers directly.

import (
	"context"

	"github.com/gorun-hpc/gorun/collectives"
	"github.com/gorun-hpc/gorun/internal/engine"
	"github.com/gorun-hpc/gorun/internal/kernels"
)

// p2pMsg is a point-to-point message started and not yet run.
type p2pMsg struct {
	ctx   context.Context
	send  bool
	peer  int
	tag   int
	dt    kernels.DType
	count int
	buf   []byte
	req   *Request
}

func (m *p2pMsg) name() string {
	if m.send {
		return "send"
	}
	return "recv"
}

// deferP2P starts m: it waits for the next flush.
func (c *Comm) deferP2P(m p2pMsg) *Request {
	r := &Request{done: make(chan struct{})}
	r.c.Store(c)
	m.req = r
	c.turnMu.Lock()
	c.p2p = append(c.p2p, m)
	c.p2pPending.Store(int32(len(c.p2p)))
	c.turnMu.Unlock()
	return r
}

// p2pTurn is a blocking Send or Recv's way in: with no message waiting it
// returns a ticket (the common case, as cheap as ticket); otherwise m
// joins the waiting ones, which run now, and the request is returned.
func (c *Comm) p2pTurn(m p2pMsg) (uint64, *Request) {
	if c.p2pPending.Load() == 0 {
		return c.tickets.Add(1) - 1, nil
	}
	c.turnMu.Lock()
	defer c.turnMu.Unlock()
	if len(c.p2p) == 0 {
		t := c.tickets.Add(1) - 1
		return t, nil
	}
	r := &Request{done: make(chan struct{})}
	m.req = r
	c.p2p = append(c.p2p, m)
	c.p2pPending.Store(int32(len(c.p2p)))
	c.flushP2PLocked()
	return 0, r
}

// flushP2P runs the waiting messages, if any.
func (c *Comm) flushP2P() {
	c.turnMu.Lock()
	if len(c.p2p) > 0 {
		c.flushP2PLocked()
	}
	c.turnMu.Unlock()
}

// flushP2PLocked gives the waiting messages the next ticket, as one group.
func (c *Comm) flushP2PLocked() {
	msgs := c.p2p
	c.p2p = nil
	c.p2pPending.Store(0)
	t := c.tickets.Add(1) - 1
	for i := range msgs {
		msgs[i].req.c.Store(nil) // flushed: Wait need not flush again
	}
	engine.Go(func() { c.runP2P(t, msgs) })
}

// runP2P runs the group msgs at ticket t and completes their requests.
func (c *Comm) runP2P(t uint64, msgs []p2pMsg) {
	ctx, stop := groupContext(msgs)
	defer stop()
	name := msgs[0].name()
	if len(msgs) > 1 {
		name = "sendrecv"
	}
	err := c.enter(ctx, t, name)
	if err != nil {
		complete(msgs, err)
		return
	}
	// Complete before the turn passes on: an operation started after these
	// finds them done.
	complete(msgs, c.execP2P(ctx, msgs))
	c.release()
}

func complete(msgs []p2pMsg, err error) {
	for i := range msgs {
		msgs[i].req.err = rankErr(msgs[i].name(), err)
		close(msgs[i].req.done)
	}
}

// groupContext ends when the context of any message of the group ends:
// they run as one call, and one given up aborts the communicator anyway.
func groupContext(msgs []p2pMsg) (context.Context, func()) {
	first := msgs[0].ctx
	same := true
	for i := range msgs {
		same = same && msgs[i].ctx == first
	}
	if same {
		return first, func() {}
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	var stops []func() bool
	for i := range msgs {
		m := msgs[i].ctx
		stops = append(stops, context.AfterFunc(m, func() { cancel(context.Cause(m)) }))
	}
	return ctx, func() {
		for _, s := range stops {
			s()
		}
		cancel(nil)
	}
}

// execP2P runs msgs; the caller holds the turn.
func (c *Comm) execP2P(ctx context.Context, msgs []p2pMsg) error {
	self := 0
	for i := range msgs {
		m := &msgs[i]
		if m.peer < 0 || m.peer >= c.size {
			what := "source"
			if m.send {
				what = "destination"
			}
			return c.invalid(m.name(), "%s %d (rank %d of %d)", what, m.peer, c.rank, c.size)
		}
		if !tagValid(m.tag) {
			return c.badTag(m.name(), m.tag)
		}
		if m.peer == c.rank {
			self++
		}
	}
	if self > 0 {
		if err := c.selfP2P(msgs); err != nil {
			return err
		}
		if self == len(msgs) {
			return nil
		}
		wire := make([]p2pMsg, 0, len(msgs)-self)
		for _, m := range msgs {
			if m.peer != c.rank {
				wire = append(wire, m)
			}
		}
		msgs = wire
	}
	if len(msgs) == 1 {
		m := &msgs[0]
		s := spec{coll: collectives.SendRecv, dt: m.dt, root: m.tag, count: m.count, peer: m.peer, send: m.send}
		if m.send {
			s.input = m.buf
		} else {
			s.work = m.buf
		}
		return c.exec(ctx, &s)
	}
	return c.failed(c.execGroup(ctx, msgs))
}

// execGroup runs msgs, two or more to other ranks, as one operation.
func (c *Comm) execGroup(ctx context.Context, msgs []p2pMsg) error {
	if err := c.eng.Err(); err != nil {
		return err
	}
	var nsend, nrecv, sendBytes, recvBytes int
	var in, out []byte // the single send's and receive's buffers
	for i := range msgs {
		if msgs[i].send {
			nsend++
			sendBytes += len(msgs[i].buf)
			in = msgs[i].buf
		} else {
			nrecv++
			recvBytes += len(msgs[i].buf)
			out = msgs[i].buf
		}
	}
	if nsend > 1 {
		if cap(c.p2pIn) < sendBytes {
			c.p2pIn = make([]byte, max(sendBytes, 2*cap(c.p2pIn)))
		}
		in = c.p2pIn[:sendBytes]
	}
	if nrecv > 1 {
		out = c.scratchFor(recvBytes)
	}
	window := engine.Window(stagingFor(c.cfg, c.size))
	gm := make([]collectives.GroupMsg, len(msgs))
	sigs := make([]engine.Call, len(msgs))
	var inOff, outOff int
	for i := range msgs {
		m := &msgs[i]
		es := m.dt.Size()
		n := len(m.buf)
		g := collectives.GroupMsg{Send: m.send, Peer: m.peer, Len: n,
			Chunk: max(1, min(collectives.ChunkBytes(collectives.Direct, 2, n), window)/es) * es}
		sig := engine.Call{Coll: collectives.SendRecv, DType: m.dt, Root: m.tag, Count: m.count}
		if m.send {
			sig.Seq = c.sendSeq[m.peer]
			c.sendSeq[m.peer]++
			if nsend > 1 {
				g.Off = inOff
				copy(in[inOff:], m.buf)
				inOff += n
			}
		} else {
			sig.Seq = c.recvSeq[m.peer]
			c.recvSeq[m.peer]++
			if nrecv > 1 {
				g.Off = outOff
				outOff += n
			}
		}
		gm[i], sigs[i] = g, sig
	}
	if err := c.eng.Admit(collectives.SendRecv, 0); err != nil { // a peer's withdrawal
		return err
	}
	p := engine.Compile(collectives.GroupSendRecv(c.rank, c.size, gm))
	if err := c.connectPlan(ctx, p); err != nil { // connect.go
		return err
	}
	c.call = engine.Call{Coll: collectives.SendRecv, DType: kernels.Uint8, Count: sendBytes + recvBytes,
		Seq: sigs[0].Seq, Root: sigs[0].Root, Work: out, Input: in, Sigs: sigs}
	s := spec{coll: collectives.SendRecv, dt: kernels.Uint8, count: sendBytes + recvBytes, work: out, input: in, peer: msgs[0].peer, group: true}
	c.ctl.Enter("sendrecv", uint64(sigs[0].Seq))
	var err error
	if observable && c.obs != nil {
		err = c.obs.run(ctx, c, p, collectives.Direct, &s)
	} else {
		err = c.eng.Run(ctx, p, &c.call, c.cfg.timeout)
	}
	c.ctl.Leave()
	c.call = engine.Call{}
	if err != nil {
		if r, ok := brokenPeer(err); ok && c.shrink.node != nil {
			c.shrink.node.Suspect(r)
		}
		return err
	}
	if nrecv > 1 {
		off := 0
		for i := range msgs {
			if m := &msgs[i]; !m.send {
				copy(m.buf, out[off:off+len(m.buf)])
				off += len(m.buf)
			}
		}
	}
	return nil
}

// selfP2P delivers the messages of msgs from this rank to itself, the k-th
// send to the k-th receive, after checking them all: tags, lengths and
// types must match (else ErrMismatch), and each must have its counterpart.
func (c *Comm) selfP2P(msgs []p2pMsg) error {
	if err := c.eng.Err(); err != nil {
		return err
	}
	var sends, recvs []*p2pMsg
	for i := range msgs {
		switch m := &msgs[i]; {
		case m.peer != c.rank:
		case m.send:
			sends = append(sends, m)
		default:
			recvs = append(recvs, m)
		}
	}
	for k := range min(len(sends), len(recvs)) {
		if s, r := sends[k], recvs[k]; s.tag != r.tag || s.count != r.count || s.dt != r.dt {
			return c.mismatch("recv", "message %d from rank %d to itself: sent with tag %d, %d×%v; received with tag %d, %d×%v",
				k, c.rank, s.tag, s.count, s.dt, r.tag, r.count, r.dt)
		}
	}
	switch k := min(len(sends), len(recvs)); {
	case k < len(sends):
		return c.invalid("send", "send to this rank (%d) with tag %d could never complete: no IRecv from this rank was started to run with it", c.rank, sends[k].tag)
	case k < len(recvs):
		return c.invalid("recv", "receive from this rank (%d) with tag %d could never complete: no ISend to this rank was started to run with it", c.rank, recvs[k].tag)
	}
	for k, s := range sends {
		copy(recvs[k].buf, s.buf)
	}
	return nil
}
