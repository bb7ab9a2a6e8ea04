package collectives

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
// first tree, the second half the second tree, chunk by chunk. A piece
// goes up both trees before it comes down either: the sends to one peer
// are posted in program order, and where a rank's parent in one tree is
// its child or parent in the other (every rank over 2 ranks, where each
// is the other's only child), a piece's way up in one tree would
// otherwise wait behind its way down in the other, which waits for the
// root. Every rank orders its ops alike, so the sends between two ranks
// still meet their receives in order: up in tree 0, up in tree 1, then
// down in each.
func DoubleTreeAllReduce(rank, size, count, chunk int) *Schedule {
	s := &Schedule{Rank: rank, Size: size}
	var trees [2][3]int
	trees[0][0], trees[0][1], trees[0][2] = btree(size, rank)
	trees[1][0], trees[1][1], trees[1][2] = dtree(size, rank)
	half := count / 2
	base := [2]int{0, half}
	lens := [2]int{half, count - half}
	for p := 0; p < max(lens[0], lens[1]); p += chunk {
		for t := range 2 { // up: reduce the children's pieces, send to the parent
			if p >= lens[t] {
				continue
			}
			off, n := base[t]+p, min(chunk, lens[t]-p)
			up, d0, d1 := trees[t][0], trees[t][1], trees[t][2]
			for _, c := range [2]int{d0, d1} {
				if c >= 0 {
					s.add(RecvReduce, Work, c, off, n)
				}
			}
			if up >= 0 {
				s.reducing = true
				s.add(Send, Work, up, off, n)
				s.reducing = false
			}
		}
		for t := range 2 { // down: take the result from the parent, send it to the children
			if p >= lens[t] {
				continue
			}
			off, n := base[t]+p, min(chunk, lens[t]-p)
			up, d0, d1 := trees[t][0], trees[t][1], trees[t][2]
			if up >= 0 {
				s.add(Recv, Work, up, off, n)
			}
			for _, c := range [2]int{d0, d1} {
				if c >= 0 {
					s.add(Send, Work, c, off, n)
				}
			}
		}
	}
	return s.Finalize()
}
