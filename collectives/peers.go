package collectives

// Peer sets: which ranks a rank exchanges messages with under each
// algorithm, without building the schedule. A communicator connects these
// peers, and only these, when it first runs the algorithm (package comm);
// at start-up it connects InitPeers, the peers of the algorithms Select
// picks, so that the first collectives need no connection set-up.
//
//	ring, chain             rank±1                               2
//	tree (double binary)    parent and children in both trees    ≤ 6
//	binomial (root 0)       parent, children                     ≤ log2 n + 1
//	recursive doubling, hd  rank^2^k, folded rank±p              log2 n (+1)
//	bruck, dissemination    rank±2^k mod n                       ≤ 2·log2 n
//	direct (alltoall, ...)  everyone                             n-1
//
// sim_test.go checks each against the peers of the built schedules.

import (
	"math/bits"
	"slices"
)

// Peers returns the distinct peers of rank under algorithm a of c over
// size ranks (root for the rooted collectives), ascending. A Direct
// algorithm lists every other rank for alltoall and the root's side of
// gather and scatter; point-to-point (SendRecv) has no fixed set (nil).
func Peers(c Collective, a Algo, rank, size, root int) []int {
	if size < 2 || rank < 0 || rank >= size {
		return nil
	}
	if a == Auto {
		a = Algos(c)[0]
	}
	var p peerSet
	switch a {
	case Ring:
		p.add(size, rank, mod(rank-1, size), mod(rank+1, size))
	case Chain:
		v := mod(rank-root, size)
		if v > 0 {
			p.add(size, rank, mod(rank-1, size))
		}
		if v < size-1 {
			p.add(size, rank, mod(rank+1, size))
		}
	case Tree:
		if c == AllReduce {
			u, d0, d1 := btree(size, rank)
			p.add(size, rank, u, d0, d1)
			u, d0, d1 = dtree(size, rank)
			p.add(size, rank, u, d0, d1)
			break
		}
		v := mod(rank-root, size)
		parent, children := binomialTree(v, size)
		if parent >= 0 {
			p.add(size, rank, mod(parent+root, size))
		}
		for _, ch := range children {
			p.add(size, rank, mod(ch+root, size))
		}
	case RecDoubling, HalvingDoubling:
		if c == Scan || c == ExScan { // Hillis–Steele (vector.go)
			first := 0
			if c == ExScan {
				p.add(size, rank, rank-1, rank+1)
				first = 1
			}
			for d := 1; rank >= first && d < size-first; d <<= 1 {
				if rank+d < size {
					p.add(size, rank, rank+d)
				}
				if rank-d >= first {
					p.add(size, rank, rank-d)
				}
			}
			break
		}
		f := newFold(size)
		a := f.active(rank)
		switch {
		case rank >= f.p:
			p.add(size, rank, rank-f.p)
		case rank < f.rem:
			p.add(size, rank, rank+f.p)
		}
		if a >= 0 {
			for m := 1; m < f.p; m <<= 1 {
				p.add(size, rank, f.real(a^m))
			}
		}
	case Bruck, Dissemination:
		for d := 1; d < size; d <<= 1 {
			p.add(size, rank, mod(rank-d, size), mod(rank+d, size))
		}
	case Direct:
		switch c {
		case Gather, Scatter, GatherV, ScatterV:
			if rank != root {
				p.add(size, rank, root)
				break
			}
			fallthrough
		case AllToAll, AllToAllV:
			for q := range size {
				p.add(size, rank, q)
			}
		default:
			return nil
		}
	}
	slices.Sort(p.ranks)
	return p.ranks
}

// InitPeers returns the peers rank connects to at start-up: the union of
// Peers over the algorithms Select may pick for the rootless collectives
// and the rooted ones at root 0 (allreduce: recursive doubling,
// halving-doubling, double tree and ring; broadcast and reduce: binomial
// tree and chain; allgather: bruck and ring; reduce-scatter: ring and
// recursive doubling; barrier: dissemination). Ascending.
func InitPeers(rank, size int) []int {
	var p peerSet
	for _, ca := range [...]struct {
		c Collective
		a Algo
	}{{AllReduce, Ring}, {AllReduce, Tree}, {AllReduce, RecDoubling}, {Broadcast, Tree}, {Broadcast, Chain},
		{AllGather, Bruck}, {Barrier, Dissemination}} {
		p.add(size, rank, Peers(ca.c, ca.a, rank, size, 0)...)
	}
	slices.Sort(p.ranks)
	return p.ranks
}

// MaxInitPeers bounds len(InitPeers(r, size)) for every r: 2·log2(size)
// (rank±2^k, which covers ring, chain, binomial trees and, for a power of
// two, recursive doubling), plus the pair partner and the folded partners
// of recursive doubling and the double tree's odd-size shift (4).
func MaxInitPeers(size int) int {
	if size < 2 {
		return 0
	}
	return min(size-1, 2*bits.Len(uint(size-1))+4)
}

// peerSet collects distinct peers (few: a slice beats a map).
type peerSet struct{ ranks []int }

func (p *peerSet) add(size, self int, qs ...int) {
	for _, q := range qs {
		if q >= 0 && q < size && q != self && !slices.Contains(p.ranks, q) {
			p.ranks = append(p.ranks, q)
		}
	}
}

func (p *peerSet) with(size, self int, qs ...int) []int {
	p.add(size, self, qs...)
	return p.ranks
}
