package comm

import (
	"context"
	"errors"
	"slices"
	"time"
	"unsafe"

	"github.com/gorun-hpc/gorun/collectives"
	"github.com/gorun-hpc/gorun/internal/engine"
	"github.com/gorun-hpc/gorun/internal/kernels"
)

// Hierarchical collectives, for communicators whose ranks span hosts with
// more than one rank on some host, as Open MPI's coll/han, MPICH's
// SMP-aware collectives, NCCL's trees and Horovod's hierarchical allreduce
// do. Each is a composition of flat collectives over two kinds of
// sub-communicator (topology.go): local, the ranks of one host (shm), and
// cross, the ranks that share a local rank across hosts (the network).
// With L ranks on each of H hosts:
//
//   - allreduce: the host's ranks reduce-scatter the buffer into L shards
//     (shm); each cross communicator allreduces its shard between hosts,
//     so all L ranks of a host use the host's link at once, each moving
//     1/L of the data (between two hosts as an exchange of halves with
//     one connection for each direction: hierCross2); the host's ranks
//     allgather the shards (shm). The network carries 2(H-1)/H of the
//     buffer per host, where a flat ring over H·L ranks carries
//     2(HL-1)/(HL).
//   - broadcast: the root scatters the buffer over its host's ranks, each
//     cross communicator broadcasts its shard from the root's host, and
//     every host allgathers the shards.
//   - allgather: each cross communicator allgathers its ranks' blocks,
//     then every host allgathers what its ranks collected.
//   - reduce-scatter: every host reduce-scatters the blocks grouped by the
//     local rank of their owner, then each cross communicator
//     reduce-scatters what its ranks hold.
//   - barrier: a barrier on each host, one among one rank per host, and
//     another on each host.
//
// Hosts with different rank counts: allreduce cuts the buffer into as
// many shards as the smallest host has ranks (reduce to and broadcast from
// the shard's owner inside a host), broadcast goes through one leader per
// host, and allgather and reduce-scatter stay flat.
//
// A hierarchical collective runs holding its communicator's turn, so the
// sub-communicators see operations in the same order on every rank.

// hierMinBytes is the smallest buffer worth three phases instead of one
// flat algorithm (allreduce, broadcast; the full buffer of allgather and
// reduce-scatter). Below it the flat log-step algorithms have fewer
// message latencies.
const hierMinBytes = 64 << 10

// hierFor reports whether c runs coll on bytes hierarchically: the
// communicator spans hosts, GORUN_ALGO (or WithAlgorithm) forces nothing
// for coll, and results need not be bitwise equal to the flat algorithms'
// (Deterministic). With GORUN_DEBUG=info it logs the first call of each
// collective that runs hierarchically on c.
func (c *Comm) hierFor(coll collectives.Collective, bytes int) bool {
	h := c.hier
	if h == nil || c.cfg.algos[coll] != collectives.Auto || c.cfg.deterministic {
		return false
	}
	var yes bool
	switch coll {
	case collectives.AllReduce, collectives.Broadcast:
		yes = bytes >= hierMinBytes
	case collectives.AllGather, collectives.ReduceScatter:
		yes = h.even && bytes >= hierMinBytes
	case collectives.Barrier:
		yes = true
	}
	if yes && c.cfg.debug >= debugInfo && h.told&(1<<coll) == 0 {
		h.told |= 1 << coll
		c.debugf(debugInfo, "%s of %d bytes runs hierarchically (rank %d of %d on %d hosts; logged once per collective)", coll, bytes, c.rank, c.size, h.hosts)
	}
	return yes
}

// watchHier fails c's sub-communicators when eng, c's engine, fails (an
// Abort, a peer's abort notice, a failure the gossip reported), so that no
// rank stays in a sub-communicator's operation waiting for a rank that
// has given up: a sub-communicator has links of its own, which a frozen
// or aborting rank leaves open. The culprit keeps its rank where it
// belongs to the sub-communicator; elsewhere this rank is named, and
// hierErr returns c's own error, which names the culprit. Close (stop,
// or the engine's ErrClosed) fails nothing.
func (c *Comm) watchHier(eng *engine.Engine, stop <-chan struct{}, watched chan<- struct{}) {
	defer close(watched)
	select {
	case <-eng.Done():
	case <-stop:
		return
	}
	err := eng.Err()
	if errors.Is(err, ErrClosed) {
		return
	}
	culprit, cause := -1, err
	var pe *engine.PeerError
	if errors.As(err, &pe) {
		culprit, cause = pe.Rank, pe.Err
	}
	h, t := c.hier, c.topo
	for _, x := range []*Comm{h.local, h.cross, h.back} {
		if x == nil {
			continue
		}
		r := x.rank
		switch {
		case x == h.local && culprit >= 0 && t.HostOf[culprit] == h.hostIdx:
			r = slices.Index(t.Hosts[h.hostIdx], culprit)
		case x != h.local && culprit >= 0 && slices.Index(t.Hosts[t.HostOf[culprit]], culprit) == h.localIdx:
			r = t.HostOf[culprit]
		}
		x.eng.Abort(r, cause)
	}
}

// hierErrGrace bounds how long a failed hierarchical collective waits for
// c's own engine to fail too (the notice of the rank that caused it
// travels on c's links and on the sub-communicators' at once).
const hierErrGrace = 100 * time.Millisecond

// hierErr is the error of a hierarchical collective that failed with err
// (named in c's ranks, subErr): c's own error where c failed, since that
// names the rank that caused it where a sub-communicator may name one
// that passed the failure on; else err, and c fails with it, so that
// every rank's next collective fails as a flat one would (its peers
// learn it from c's abort notice).
func (c *Comm) hierErr(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if ctx.Err() == nil {
		t := time.NewTimer(hierErrGrace)
		select {
		case <-c.eng.Done():
		case <-t.C:
		}
		t.Stop()
	}
	if perr := c.eng.Err(); perr != nil {
		return perr
	}
	var re *RankError
	if errors.As(err, &re) && re.Rank >= 0 && re.Rank != c.rank {
		c.eng.Abort(re.Rank, re.Err)
	} else {
		c.eng.Withdraw(err)
	}
	return err
}

// hierScratch returns two typed buffers of a and b elements from h's
// scratch (reused).
func hierScratch[T Number](h *hierComms, a, b int) ([]T, []T) {
	var z T
	es := int(unsafe.Sizeof(z))
	if n := (a + b) * es; cap(h.scratch) < n {
		h.scratch = make([]byte, n)
	}
	all := unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(h.scratch))), a+b)
	return all[:a:a], all[a:]
}

// subErr renames the rank in the error of a sub-communicator (local, or
// cross and back, which have the same ranks) to its rank in c, the rank
// the error's text names already (subComm).
func (c *Comm) subErr(err error, local bool) error {
	if err == nil || c.hier == nil {
		return err
	}
	if local {
		return c.hier.local.named(err)
	}
	return c.hier.cross.named(err)
}

// shardOf is shard j of n elements cut into s shards of ceil(n/s).
func shardOf(n, s, j int) (lo, hi int) {
	b := (n + s - 1) / s
	return min(n, j*b), min(n, (j+1)*b)
}

// hierAllReduce allreduces buf in place (Avg: the caller scales).
func hierAllReduce[T Number](ctx context.Context, c *Comm, buf []T, op Op) error {
	h := c.hier
	if op == Avg {
		op = Sum
	}
	n, s := len(buf), h.shards
	if !h.even {
		for j := range s {
			if lo, hi := shardOf(n, s, j); lo < hi {
				if err := Reduce(ctx, h.local, buf[lo:hi], buf[lo:hi], op, j); err != nil {
					return c.subErr(err, true)
				}
			}
		}
		if lo, hi := shardOf(n, s, h.localIdx); h.cross != nil && lo < hi {
			if err := AllReduce(ctx, h.cross, buf[lo:hi], buf[lo:hi], op); err != nil {
				return c.subErr(err, false)
			}
		}
		for j := range s {
			if lo, hi := shardOf(n, s, j); lo < hi {
				if err := Broadcast(ctx, h.local, buf[lo:hi], j); err != nil {
					return c.subErr(err, true)
				}
			}
		}
		return nil
	}
	cut := newHierCut(h, buf, true)
	piece, mine := cut.piece, cut.mine
	cross := func(ctx context.Context, shard []T) error {
		if h.back != nil && hierDirected {
			return hierCross2(ctx, c, shard, cut.tmp, op)
		}
		return AllReduce(ctx, h.cross, shard, shard, op)
	}
	if cut.m == 1 {
		p := piece(0)
		if err := ReduceScatter(ctx, h.local, p, mine(p), op); err != nil {
			return c.subErr(err, true)
		}
		if err := cross(ctx, mine(p)); err != nil {
			return c.subErr(err, false)
		}
		if err := AllGather(ctx, h.local, mine(p), p); err != nil {
			return c.subErr(err, true)
		}
	} else if err := hierPipeline(ctx, c, cut.m, func(ctx context.Context, i int) error {
		return ReduceScatter(ctx, h.local, piece(i), mine(piece(i)), op)
	}, func(ctx context.Context, i int) error {
		return cross(ctx, mine(piece(i)))
	}, func(ctx context.Context, i int) error {
		return AllGather(ctx, h.local, mine(piece(i)), piece(i))
	}); err != nil {
		return err
	}
	cut.done()
	return nil
}

// hierCut cuts a buffer of a hierarchical allreduce or broadcast into
// hierPieces pieces of per elements, a multiple of the shard count s,
// each split into s equal shards; the last piece, if it does not split,
// is padded in h's scratch (copied in by newHierCut where the caller's
// data is the input, and back by done).
type hierCut[T Number] struct {
	buf, padded, tmp []T
	m, per, last, s  int
	localIdx         int
}

// newHierCut cuts buf; in: buf holds input on this rank (copy it into
// the padding). tmp is scratch of half a shard (hierCross2).
func newHierCut[T Number](h *hierComms, buf []T, in bool) *hierCut[T] {
	n, s := len(buf), h.shards
	m := hierPieces(n * int(unsafe.Sizeof(buf[0])))
	per := (n + m - 1) / m
	per = (per + s - 1) / s * s
	m = (n + per - 1) / per
	p := &hierCut[T]{buf: buf, m: m, per: per, last: n - (m-1)*per, s: s, localIdx: h.localIdx}
	pad := 0
	if p.last%s != 0 {
		pad = (p.last + s - 1) / s * s
	}
	p.padded, p.tmp = hierScratch[T](h, pad, (per/s+1)/2)
	if pad > 0 && in {
		copy(p.padded, buf[(m-1)*per:])
		clear(p.padded[p.last:])
	}
	return p
}

// piece is piece i.
func (p *hierCut[T]) piece(i int) []T {
	if i == p.m-1 && len(p.padded) > 0 {
		return p.padded
	}
	return p.buf[i*p.per : min(len(p.buf), (i+1)*p.per)]
}

// mine is this rank's shard of a piece.
func (p *hierCut[T]) mine(piece []T) []T {
	b := len(piece) / p.s
	return piece[p.localIdx*b : (p.localIdx+1)*b]
}

// done copies the padded last piece back.
func (p *hierCut[T]) done() {
	if len(p.padded) > 0 {
		copy(p.buf[(p.m-1)*p.per:], p.padded[:p.last])
	}
}

// hierPieceBytes is the size of the pieces a large hierarchical allreduce
// or broadcast is cut into, so that one piece's exchange between hosts
// overlaps the next piece's reduce-scatter (scatter) and the last one's
// allgather inside the host (as coll/han and NCCL pipeline theirs); at
// most hierMaxPieces.
// Namespace cluster, 2 hosts x 2 ranks on 2 CPUs, 2 Gbit/s links,
// 2026-11-27, 6 interleaved pairs: 16 MiB 75.6-77.7 -> 70.3-71.4 ms, 64
// MiB 315-321 -> 288-291 ms (the link's bound: 67 and 268), 1 and 4 MiB
// level; 1 MiB pieces (at most 16) measured the same. Broadcast, 3
// pairs: 16 MiB 72.5-73.1 -> 68.7-69.0 ms (the flat chain 68.6-69.1).
const (
	hierPieceBytes = 2 << 20
	hierMaxPieces  = 8
)

// hierPieces is the number of pieces for an allreduce of bytes.
func hierPieces(bytes int) int {
	return min(hierMaxPieces, max(1, bytes/hierPieceBytes))
}

// hierPipeline runs m pieces through three phases: local(i), then
// cross(i), then gather(i). The local communicator's operations run on
// the caller's goroutine in one order on every rank (every piece's local
// phase, then every piece's gather, each gather waiting for its piece's
// cross phase), and the cross communicators' on another goroutine, piece
// by piece, as soon as the piece's local phase is done. The first failure
// cancels the rest; the error returned is the one that was not caused by
// that cancellation, named by rank in c.
func hierPipeline(ctx context.Context, c *Comm, m int, local, cross, gather func(context.Context, int) error) error {
	ctx2, cancel := context.WithCancel(ctx)
	defer cancel()
	ready := make(chan int, m)
	crossed := make(chan error, m) // one result per piece, or the reason it stopped
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		for range m {
			var i int
			select {
			case i = <-ready:
			case <-ctx2.Done():
				crossed <- ctx2.Err()
				return
			}
			err := cross(ctx2, i)
			crossed <- err
			if err != nil {
				cancel()
				return
			}
		}
	}()
	var lerr, xerr error
	for i := 0; i < m && lerr == nil; i++ {
		if lerr = local(ctx2, i); lerr == nil {
			ready <- i
		}
	}
	for i := 0; i < m && lerr == nil; i++ {
		if xerr = <-crossed; xerr != nil {
			break
		}
		lerr = gather(ctx2, i)
	}
	cancel()
	<-exited
	for xerr == nil && len(crossed) > 0 {
		xerr = <-crossed
	}
	// An error of ours caused by the cancellation above is not the cause.
	ours := func(err error) bool { return ctx.Err() == nil && errors.Is(err, context.Canceled) }
	switch {
	case lerr != nil && (xerr == nil || !ours(lerr)):
		return c.subErr(lerr, true)
	case xerr != nil:
		return c.subErr(xerr, false)
	}
	return nil
}

// hierDirected turns on hierCross2 between two hosts (tests turn it off
// to check both paths).
var hierDirected = true

// hierCross2 allreduces shard between the two hosts' ranks of a cross
// communicator as a reduce-scatter and an allgather of halves, with each
// host's sends on a communicator of their own: host 0 sends on h.cross and
// host 1 on h.back, so each TCP connection carries bulk data one way only.
// AllReduce over the 2-rank cross communicator sends both ways on one
// connection, and then the staging credits that pace each direction wait
// behind the other direction's data in the sender's queue (a shaped link
// holds milliseconds of it): the 2-host exchange ran at about half the
// link's rate, where a ring over 3 or more hosts sends each connection's
// data one way and its credits the other. tmp holds at least half the
// shard (rounded up).
func hierCross2[T Number](ctx context.Context, c *Comm, shard, tmp []T, op Op) error {
	h := c.hier
	out, in := h.cross, h.back
	peer := 1
	half := len(shard) / 2
	mine, theirs := shard[:half], shard[half:]
	if h.hostIdx == 1 {
		out, in = in, out
		peer = 0
		mine, theirs = theirs, mine
	}
	tmp = tmp[:len(mine)]
	if err := hierExchange(ctx, out, in, theirs, tmp, peer); err != nil {
		return err
	}
	kernels.Reduce(op, mine, tmp)
	return hierExchange(ctx, out, in, mine, theirs, peer)
}

// hierExchange sends send to peer on out while it receives recv from peer
// on in.
func hierExchange[T Number](ctx context.Context, out, in *Comm, send, recv []T, peer int) error {
	s := ISend(ctx, out, send, peer, 0)
	s.Test() // runs it now: the receive below does not flush another communicator
	err := Recv(ctx, in, recv, peer, 0)
	if err != nil {
		return errors.Join(err, s.Wait(ctx))
	}
	return s.Wait(ctx)
}

// hierBroadcast broadcasts root's buf.
func hierBroadcast[T Number](ctx context.Context, c *Comm, buf []T, root int) error {
	h, t := c.hier, c.topo
	rootHost := t.HostOf[root]
	rootLocal := 0
	for i, r := range t.Hosts[rootHost] {
		if r == root {
			rootLocal = i
		}
	}
	mine := h.hostIdx == rootHost
	if !h.even { // through one leader (local rank 0) per host
		if mine {
			if err := Broadcast(ctx, h.local, buf, rootLocal); err != nil {
				return c.subErr(err, true)
			}
		}
		if h.localIdx == 0 {
			if err := Broadcast(ctx, h.cross, buf, rootHost); err != nil {
				return c.subErr(err, false)
			}
		}
		if !mine {
			return c.subErr(Broadcast(ctx, h.local, buf, 0), true)
		}
		return nil
	}
	// In pieces, as hierAllReduce: the root's host scatters each piece,
	// the cross communicators broadcast their shards of it, every host
	// allgathers it.
	cut := newHierCut(h, buf, mine)
	piece, shard := cut.piece, cut.mine
	scatter := func(ctx context.Context, i int) error {
		if !mine {
			return nil
		}
		return Scatter(ctx, h.local, piece(i), shard(piece(i)), rootLocal)
	}
	cross := func(ctx context.Context, i int) error {
		return Broadcast(ctx, h.cross, shard(piece(i)), rootHost)
	}
	gather := func(ctx context.Context, i int) error {
		return AllGather(ctx, h.local, shard(piece(i)), piece(i))
	}
	if cut.m == 1 {
		if err := scatter(ctx, 0); err != nil {
			return c.subErr(err, true)
		}
		if err := cross(ctx, 0); err != nil {
			return c.subErr(err, false)
		}
		if err := gather(ctx, 0); err != nil {
			return c.subErr(err, true)
		}
	} else if err := hierPipeline(ctx, c, cut.m, scatter, cross, gather); err != nil {
		return err
	}
	cut.done()
	return nil
}

// hierAllGather gathers every rank's send into recv (rank order); hosts
// have equal rank counts. Its two phases carry mark (allGather's).
func hierAllGather[T Number](ctx context.Context, c *Comm, send, recv []T, mark int) error {
	h, t := c.hier, c.topo
	n, H, L := len(send), h.hosts, h.shards
	byHost, byLocal := hierScratch[T](h, H*n, L*H*n)
	if err := allGather(ctx, h.cross, h.cross.ticket(), send, byHost, mark); err != nil {
		return c.subErr(err, false)
	}
	if err := allGather(ctx, h.local, h.local.ticket(), byHost, byLocal, mark); err != nil {
		return c.subErr(err, true)
	}
	for j := range L {
		for hh := range H {
			r := t.Hosts[hh][j]
			copy(recv[r*n:(r+1)*n], byLocal[(j*H+hh)*n:(j*H+hh+1)*n])
		}
	}
	return nil
}

// hierReduceScatter reduces send and leaves this rank's block in recv
// (Avg: the caller scales); hosts have equal rank counts.
func hierReduceScatter[T Number](ctx context.Context, c *Comm, send, recv []T, op Op) error {
	h, t := c.hier, c.topo
	if op == Avg {
		op = Sum
	}
	n, H, L := len(recv), h.hosts, h.shards
	byHost, byLocal := hierScratch[T](h, H*n, L*H*n)
	for j := range L {
		for hh := range H {
			r := t.Hosts[hh][j]
			copy(byLocal[(j*H+hh)*n:(j*H+hh+1)*n], send[r*n:(r+1)*n])
		}
	}
	if err := ReduceScatter(ctx, h.local, byLocal, byHost, op); err != nil {
		return c.subErr(err, true)
	}
	return c.subErr(ReduceScatter(ctx, h.cross, byHost, recv, op), false)
}

// hierBarrier: each host, then one rank per host, then each host again.
func (c *Comm) hierBarrier(ctx context.Context) error {
	h := c.hier
	if err := h.local.Barrier(ctx); err != nil {
		return c.subErr(err, true)
	}
	if h.localIdx == 0 {
		if err := h.cross.Barrier(ctx); err != nil {
			return c.subErr(err, false)
		}
	}
	return c.subErr(h.local.Barrier(ctx), true)
}
