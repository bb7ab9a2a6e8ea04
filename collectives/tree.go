package collectives

import "slices"

// Tree algorithms.
//
// Binomial tree (broadcast, reduce): ranks are renumbered relative to the
// root (v = rank-root mod Size). The parent of v ≠ 0 is v with its lowest set
// bit cleared; the children of v are v+m for every power of two m below v's
// lowest set bit (below Size for the root), largest subtree first. Broadcast
// receives each chunk from the parent and forwards it to the children;
// reduce receives and reduces each chunk from the children (smallest subtree
// first) and forwards the sum to the parent. log2(Size) steps.
//
// Chain (pipelined broadcast): v receives each chunk from v-1 and forwards
// it to v+1; with many chunks the chain streams at link bandwidth.
//
// Double binary tree (allreduce, as NCCL): two binary trees in which a rank
// that is an inner node of one is a leaf of the other; each tree reduces
// then broadcasts half of the buffer, chunk by chunk, so both directions of
// every link carry data and the latency is logarithmic.

// binomialParent returns the relative parent of v (-1 for the root) and the
// relative children, largest subtree first.
func binomialTree(v, n int) (parent int, children []int) {
	parent = -1
	mask := 1
	for mask < n {
		if v&mask != 0 {
			parent = v - mask
			break
		}
		mask <<= 1
	}
	for mask >>= 1; mask > 0; mask >>= 1 {
		if v+mask < n {
			children = append(children, v+mask)
		}
	}
	return parent, children
}

// BinomialBroadcast: root's Work[0:count] is copied to every rank's Work.
func BinomialBroadcast(rank, size, root, count, chunk int) *Schedule {
	s := &Schedule{Rank: rank, Size: size}
	v := mod(rank-root, size)
	parent, children := binomialTree(v, size)
	abs := func(x int) int { return mod(x+root, size) }
	for p := 0; p < count; p += chunk {
		n := min(chunk, count-p)
		if parent >= 0 {
			s.add(Recv, Work, abs(parent), p, n)
		}
		for _, c := range children {
			s.add(Send, Work, abs(c), p, n)
		}
	}
	return s.Finalize()
}

// ChainBroadcast: pipelined broadcast along root, root+1, ...
func ChainBroadcast(rank, size, root, count, chunk int) *Schedule {
	s := &Schedule{Rank: rank, Size: size}
	v := mod(rank-root, size)
	for p := 0; p < count; p += chunk {
		n := min(chunk, count-p)
		if v > 0 {
			s.add(Recv, Work, mod(rank-1, size), p, n)
		}
		if v < size-1 {
			s.add(Send, Work, mod(rank+1, size), p, n)
		}
	}
	return s.Finalize()
}

// BinomialReduce: every rank's Work[0:count] is reduced into root's Work.
// Non-root Work is scratch.
func BinomialReduce(rank, size, root, count, chunk int) *Schedule {
	s := &Schedule{Rank: rank, Size: size}
	v := mod(rank-root, size)
	parent, children := binomialTree(v, size)
	abs := func(x int) int { return mod(x+root, size) }
	for p := 0; p < count; p += chunk {
		n := min(chunk, count-p)
		for i := len(children) - 1; i >= 0; i-- {
			s.add(RecvReduce, Work, abs(children[i]), p, n)
		}
		if parent >= 0 {
			s.reducing = true
			s.add(Send, Work, abs(parent), p, n)
			s.reducing = false
		}
	}
	return s.Finalize()
}

// btree is NCCL's binary tree (ncclGetBtree): rank 0 is the root with one
// child; every other rank has a parent and up to two children.
func btree(n, rank int) (up, d0, d1 int) {
	bit := 1
	for bit < n {
		if bit&rank != 0 {
			break
		}
		bit <<= 1
	}
	if rank == 0 {
		d1 = -1
		if n > 1 {
			d1 = bit >> 1
		}
		return -1, -1, d1
	}
	up = (rank ^ bit) | (bit << 1)
	if up >= n {
		up = rank ^ bit
	}
	low := bit >> 1
	d0, d1 = -1, -1
	if low != 0 {
		d0 = rank - low
		d1 = rank + low
		for d1 >= n {
			low >>= 1
			if low == 0 {
				d1 = -1
				break
			}
			d1 = rank + low
		}
	}
	return up, d0, d1
}

// dtree is the second tree (ncclGetDtree): the first one shifted by one
// rank for odd sizes, mirrored for even sizes.
func dtree(n, rank int) (up, d0, d1 int) {
	if n%2 == 1 {
		u, a, b := btree(n, mod(rank-1, n))
		f := func(x int) int {
			if x < 0 {
				return -1
			}
			return mod(x+1, n)
		}
		return f(u), f(a), f(b)
	}
	u, a, b := btree(n, n-1-rank)
	f := func(x int) int {
		if x < 0 {
			return -1
		}
		return n - 1 - x
	}
	return f(u), f(b), f(a)
}

// DoubleTreeAllReduce: the first half of the buffer goes up and down the
// first tree, the second half the second tree, chunk by chunk.
//
// The sends to one peer are posted in program order (Schedule), so a send
// that could go at once must not stand behind one that waits: where two
// ranks are neighbours in both trees (over 2 ranks each is the other's
// parent in one tree and child in the other; over 3, rank 2's parent is
// rank 0 in both), and between the pieces of one tree. So every piece
// goes up before any comes down; between two ranks, the way up goes first
// in the tree where the sender's subtree is shallower (a leaf's pieces are
// ready at once), and the way down first in the tree where the sender is
// nearer the root. Both ends compute the same order, so the sends between
// two ranks still meet their receives in order. A piece then takes
// 2·depth steps at any count of pieces (TestDoubleTreeChain). Before
// 71da1d8 one piece took 4 steps over 2 ranks and 23 over 64, where the
// trees are 6 deep, each piece's way up behind the way down of the other
// tree; after it, 8 pieces over 4 ranks still took 25, each piece behind
// the one before.
func DoubleTreeAllReduce(rank, size, count, chunk int) *Schedule {
	s := &Schedule{Rank: rank, Size: size}
	half := count / 2
	base := [2]int{0, half}
	lens := [2]int{half, count - half}
	var sh [2]treeOf
	for t := range 2 {
		sh[t] = newTreeOf(size, t)
	}
	// byOf orders the two trees for messages from rank r by key (the
	// height or the depth of r in each), tree 0 first in a tie.
	byOf := func(key func(t, r int) int, r int) [2]int {
		if key(1, r) < key(0, r) {
			return [2]int{1, 0}
		}
		return [2]int{0, 1}
	}
	height := func(t, r int) int { return sh[t].height[r] }
	depth := func(t, r int) int { return sh[t].depth[r] }
	// each calls f with the offset and length of every piece of tree
	// t's half, in order.
	each := func(t int, f func(off, n int)) {
		for p := 0; p < lens[t]; p += chunk {
			f(base[t]+p, min(chunk, lens[t]-p))
		}
	}
	// This rank's children and parents over both trees, each once, in
	// ascending order (both ends order their messages alike).
	var kids, ups peerSet
	kids.add(size, rank, sh[0].down[rank][0], sh[0].down[rank][1], sh[1].down[rank][0], sh[1].down[rank][1])
	ups.add(size, rank, sh[0].up[rank], sh[1].up[rank])
	slices.Sort(kids.ranks)
	slices.Sort(ups.ranks)
	// Up: reduce the children's pieces, send the sums to the parent.
	for _, c := range kids.ranks {
		for _, t := range byOf(height, c) {
			if sh[t].up[c] == rank {
				each(t, func(off, n int) { s.add(RecvReduce, Work, c, off, n) })
			}
		}
	}
	s.reducing = true
	for _, t := range byOf(height, rank) {
		if u := sh[t].up[rank]; u >= 0 {
			each(t, func(off, n int) { s.add(Send, Work, u, off, n) })
		}
	}
	s.reducing = false
	// Down: take the results from the parent, send them to the children.
	for _, u := range ups.ranks {
		for _, t := range byOf(depth, u) {
			if sh[t].up[rank] == u {
				each(t, func(off, n int) { s.add(Recv, Work, u, off, n) })
			}
		}
	}
	for _, t := range byOf(depth, rank) {
		each(t, func(off, n int) {
			for _, c := range sh[t].down[rank] {
				if c >= 0 {
					s.add(Send, Work, c, off, n)
				}
			}
		})
	}
	return s.Finalize()
}

// treeOf is one of the double tree's two trees over all ranks: each
// rank's parent (-1 at the root), children (-1: none), height (the
// longest walk down to a leaf) and depth (up to the root).
type treeOf struct {
	up            []int
	down          [][2]int
	height, depth []int
}

// newTreeOf returns the double tree's tree t (0: btree, 1: dtree) over
// n ranks.
func newTreeOf(n, t int) treeOf {
	f := btree
	if t == 1 {
		f = dtree
	}
	sh := treeOf{up: make([]int, n), down: make([][2]int, n), height: make([]int, n), depth: make([]int, n)}
	for r := range n {
		u, d0, d1 := f(n, r)
		sh.up[r], sh.down[r] = u, [2]int{d0, d1}
	}
	var walk func(r, d int) int
	walk = func(r, d int) int {
		sh.depth[r] = d
		h := 0
		for _, c := range sh.down[r] {
			if c >= 0 {
				h = max(h, 1+walk(c, d+1))
			}
		}
		sh.height[r] = h
		return h
	}
	for r := range n {
		if sh.up[r] < 0 {
			walk(r, 0)
		}
	}
	return sh
}
