package collectives

// Ring algorithms.
//
// The ring passes data to the right neighbour (rank+1) and takes it from
// the left one (rank-1). The buffer is cut into Size segments. In the
// reduce-scatter phase, at step k (0 ≤ k < Size-1) rank r sends segment
// r-k-1+shift to the right and reduces segment r-k-2+shift coming from the
// left into its own copy; after Size-1 steps rank r holds the full
// reduction of segment r+shift. The allgather phase then circulates the
// finished segments: at step k rank r sends segment r-k+shift' and stores
// segment r-k-1+shift'. Every segment is further cut into chunk-sized
// pieces; since a piece depends only on the same piece of the previous step,
// pieces pipeline through the ring. Each rank sends 2(Size-1)/Size of the
// buffer in total, which is bandwidth optimal.

// ringReduceScatter appends the reduce-scatter phase: afterwards rank r holds
// the reduction of segment mod(r+shift, n) (segments given by seg).
func ringReduceScatter(s *Schedule, seg func(i int) (int, int), shift, chunk int) {
	n, r := s.Size, s.Rank
	right, left := mod(r+1, n), mod(r-1, n)
	for k := 0; k < n-1; k++ {
		so, se := seg(mod(r-k-1+shift, n))
		ro, re := seg(mod(r-k-2+shift, n))
		interleave(s, Send, right, so, se-so, RecvReduce, left, ro, re-ro, chunk)
	}
}

// ringAllGather appends the allgather phase: rank r starts owning segment
// mod(r+shift, n) and ends with all of them.
func ringAllGather(s *Schedule, seg func(i int) (int, int), shift, chunk int) {
	n, r := s.Size, s.Rank
	right, left := mod(r+1, n), mod(r-1, n)
	for k := 0; k < n-1; k++ {
		so, se := seg(mod(r-k+shift, n))
		ro, re := seg(mod(r-k-1+shift, n))
		interleave(s, Send, right, so, se-so, Recv, left, ro, re-ro, chunk)
	}
}

// interleave appends a send and a receive of one step, piece by piece, so
// that piece p of the send is posted next to piece p of the receive.
// The algorithms using it are symmetric: the peer receives what this rank
// sends with the same kind as this rank's receive (rk).
func interleave(s *Schedule, sk Kind, sp, so, sn int, rk Kind, rp, ro, rn, chunk int) {
	defer func(r bool) { s.reducing = r }(s.reducing)
	s.reducing = rk == RecvReduce
	for p := 0; p < max(sn, rn); p += chunk {
		if p < sn {
			s.add(sk, Work, sp, so+p, min(chunk, sn-p))
		}
		if p < rn {
			s.add(rk, Work, rp, ro+p, min(chunk, rn-p))
		}
	}
}

// RingAllReduce: reduce-scatter then allgather over count elements.
func RingAllReduce(rank, size, count, chunk int) *Schedule {
	s := &Schedule{Rank: rank, Size: size}
	seg := func(i int) (int, int) { return segment(count, size, i) }
	ringReduceScatter(s, seg, 0, chunk) // rank r ends with segment r
	ringAllGather(s, seg, 0, chunk)
	return s.Finalize()
}

// RingAllGather: Work holds size blocks of count elements; rank r starts
// with block r filled.
func RingAllGather(rank, size, count, chunk int) *Schedule {
	s := &Schedule{Rank: rank, Size: size}
	ringAllGather(s, blocks(count), 0, chunk)
	return s.Finalize()
}

// RingReduceScatter: Work holds size blocks of count elements (the input);
// rank r ends with block r reduced.
func RingReduceScatter(rank, size, count, chunk int) *Schedule {
	s := &Schedule{Rank: rank, Size: size}
	ringReduceScatter(s, blocks(count), 0, chunk)
	return s.Finalize()
}

func blocks(count int) func(i int) (int, int) {
	return func(i int) (int, int) { return i * count, (i + 1) * count }
}
