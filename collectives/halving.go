package collectives

// Recursive doubling and halving-doubling (Rabenseifner) allreduce.
//
// Both work on a power of two p ≤ Size of "active" ranks, ranks 0..p-1.
// The Size-p ranks r ≥ p are folded first: r sends its buffer to r-p,
// which reduces it; at the end r-p sends the result back. (MPICH folds
// adjacent pairs instead; folding across p keeps every partner at a
// distance of a power of two, so the peers of these algorithms are among
// those of bruck, dissemination and the binomial trees: a rank connects
// to 2·log2(Size) peers for all of them together, not 3·log2(Size).)
//
// Recursive doubling: at step m = 1, 2, 4, ... < p active rank a exchanges
// its whole buffer with a^m and reduces. log2(p) steps of the full size:
// best for small messages.
//
// Halving-doubling: the buffer is cut into p segments. Reduce-scatter by
// recursive halving: at step m = p/2, p/4, ..., 1 rank a keeps the half of
// its current segment range on its side of a^m, sends the other half to a^m
// and reduces the half it keeps. Afterwards a owns segment a reduced. The
// allgather then runs the steps backwards (m = 1, 2, ..., p/2), exchanging
// owned ranges. 2·log2(p) steps moving 2(p-1)/p of the buffer: good for
// medium sizes.

type fold struct {
	p, rem int
}

func newFold(n int) fold {
	p := 1
	for p*2 <= n {
		p *= 2
	}
	return fold{p: p, rem: n - p}
}

// active returns the active index of rank r, or -1 for a folded rank.
func (f fold) active(r int) int {
	if r >= f.p {
		return -1
	}
	return r
}

// real maps an active index back to its rank.
func (f fold) real(a int) int { return a }

// foldIn appends the pre-step; it reports the active index (-1: idle).
func (f fold) foldIn(s *Schedule, count, chunk int) int {
	r := s.Rank
	switch {
	case r >= f.p:
		s.reducing = true
		s.addChunked(Send, Work, r-f.p, 0, count, chunk)
		s.reducing = false
	case r < f.rem:
		s.addChunked(RecvReduce, Work, r+f.p, 0, count, chunk)
	}
	return f.active(r)
}

func (f fold) foldOut(s *Schedule, count, chunk int) {
	r := s.Rank
	switch {
	case r >= f.p:
		s.addChunked(Recv, Work, r-f.p, 0, count, chunk)
	case r < f.rem:
		s.addChunked(Send, Work, r+f.p, 0, count, chunk)
	}
}

// RecursiveDoublingAllReduce: log2 steps exchanging the whole buffer.
func RecursiveDoublingAllReduce(rank, size, count, chunk int) *Schedule {
	s := &Schedule{Rank: rank, Size: size}
	f := newFold(size)
	if a := f.foldIn(s, count, chunk); a >= 0 {
		for m := 1; m < f.p; m <<= 1 {
			peer := f.real(a ^ m)
			interleave(s, Send, peer, 0, count, RecvReduce, peer, 0, count, chunk)
		}
	}
	f.foldOut(s, count, chunk)
	return s.Finalize()
}

// HalvingDoublingAllReduce: Rabenseifner's reduce-scatter by recursive
// halving then allgather by recursive doubling.
func HalvingDoublingAllReduce(rank, size, count, chunk int) *Schedule {
	s := &Schedule{Rank: rank, Size: size}
	f := newFold(size)
	if a := f.foldIn(s, count, chunk); a >= 0 {
		seg := func(i int) int { o, _ := segment(count, f.p, i); return o }
		lo, hi := 0, f.p // segment range this rank is responsible for
		type step struct{ peer, keepLo, keepHi, giveLo, giveHi int }
		var steps []step
		for m := f.p / 2; m >= 1; m >>= 1 {
			mid := (lo + hi) / 2
			st := step{peer: f.real(a ^ m)}
			if a&m == 0 {
				st.keepLo, st.keepHi, st.giveLo, st.giveHi = lo, mid, mid, hi
			} else {
				st.keepLo, st.keepHi, st.giveLo, st.giveHi = mid, hi, lo, mid
			}
			so, se := seg(st.giveLo), seg(st.giveHi)
			ro, re := seg(st.keepLo), seg(st.keepHi)
			interleave(s, Send, st.peer, so, se-so, RecvReduce, st.peer, ro, re-ro, chunk)
			lo, hi = st.keepLo, st.keepHi
			steps = append(steps, st)
		}
		for i := len(steps) - 1; i >= 0; i-- {
			st := steps[i]
			so, se := seg(st.keepLo), seg(st.keepHi)
			ro, re := seg(st.giveLo), seg(st.giveHi)
			interleave(s, Send, st.peer, so, se-so, Recv, st.peer, ro, re-ro, chunk)
		}
	}
	f.foldOut(s, count, chunk)
	return s.Finalize()
}
