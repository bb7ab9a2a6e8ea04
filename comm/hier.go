package comm

import (
	"context"
	"errors"
	"unsafe"

	"github.com/gorun-hpc/gorun/collectives"
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
// (Deterministic).
func (c *Comm) hierFor(coll collectives.Collective, bytes int) bool {
	h := c.hier
	if h == nil || c.cfg.algos[coll] != collectives.Auto || c.cfg.deterministic {
		return false
	}
	switch coll {
	case collectives.AllReduce, collectives.Broadcast:
		return bytes >= hierMinBytes
	case collectives.AllGather, collectives.ReduceScatter:
		return h.even && bytes >= hierMinBytes
	case collectives.Barrier:
		return true
	}
	return false
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

// subErr renames the rank in a sub-communicator's error to its rank in c.
func (c *Comm) subErr(err error, local bool) error {
	var re *RankError
	if err == nil || !errors.As(err, &re) || re.Rank < 0 {
		return err
	}
	h, t := c.hier, c.topo
	r := re.Rank
	switch {
	case local && r < len(t.Hosts[h.hostIdx]):
		r = t.Hosts[h.hostIdx][r]
	case !local && r < len(t.Hosts) && h.localIdx < len(t.Hosts[r]):
		r = t.Hosts[r][h.localIdx]
	default:
		return err
	}
	return &RankError{Rank: r, Op: re.Op, Err: re.Err}
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
	b := (n + s - 1) / s
	pad := 0
	if n != s*b { // pad to s equal shards
		pad = s * b
	}
	full, tmp := hierScratch[T](h, pad, (b+1)/2)
	if pad == 0 {
		full = buf
	} else {
		copy(full, buf)
	}
	shard := full[h.localIdx*b : (h.localIdx+1)*b]
	if err := ReduceScatter(ctx, h.local, full, shard, op); err != nil {
		return c.subErr(err, true)
	}
	var err error
	if h.back != nil && hierDirected {
		err = hierCross2(ctx, c, shard, tmp, op)
	} else {
		err = AllReduce(ctx, h.cross, shard, shard, op)
	}
	if err != nil {
		return c.subErr(err, false)
	}
	if err := AllGather(ctx, h.local, shard, full); err != nil {
		return c.subErr(err, true)
	}
	if n != s*b {
		copy(buf, full[:n])
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
	n, s := len(buf), h.shards
	b := (n + s - 1) / s
	full := buf
	if n != s*b {
		full, _ = hierScratch[T](h, s*b, 0)
		copy(full, buf)
	}
	shard := full[h.localIdx*b : (h.localIdx+1)*b]
	if mine {
		if err := Scatter(ctx, h.local, full, shard, rootLocal); err != nil {
			return c.subErr(err, true)
		}
	}
	if err := Broadcast(ctx, h.cross, shard, rootHost); err != nil {
		return c.subErr(err, false)
	}
	if err := AllGather(ctx, h.local, shard, full); err != nil {
		return c.subErr(err, true)
	}
	if n != s*b {
		copy(buf, full[:n])
	}
	return nil
}

// hierAllGather gathers every rank's send into recv (rank order); hosts
// have equal rank counts.
func hierAllGather[T Number](ctx context.Context, c *Comm, send, recv []T) error {
	h, t := c.hier, c.topo
	n, H, L := len(send), h.hosts, h.shards
	byHost, byLocal := hierScratch[T](h, H*n, L*H*n)
	if err := AllGather(ctx, h.cross, send, byHost); err != nil {
		return c.subErr(err, false)
	}
	if err := AllGather(ctx, h.local, byHost, byLocal); err != nil {
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
