package collectives

// The v-collectives (per-rank counts and displacements, as MPI's
// allgatherv, gatherv, scatterv and alltoallv) and the prefix reductions.
//
// V schedules are direct: every pair that exchanges anything exchanges
// exactly one message per op (split into chunk-sized pieces), and a pair
// whose count is zero still exchanges one empty message, so that a count
// on which the two sides disagree shows up as a length mismatch in that
// message rather than as a message left over for the next operation. The
// pairwise order (to r+k, from r−k, k = 1..Size−1) keeps any two ranks from
// targeting the same peer at the same step. Counts and displacements are
// in elements; comm validates them before it builds a schedule.
//
// Scan is Hillis–Steele (recursive doubling on a line): at step
// d = 1, 2, 4, … < Size rank r sends its running prefix to r+d and
// reduces the one from r−d into it, so after step d it holds the reduction
// of ranks max(0, r−2d+1) … r. The receive of step d waits for the send of
// step d (write after read) and the send of step d for the receive of step
// d−1 (read after write); Finalize derives both. ceil(log2 Size) steps.
// ExScan first shifts every input one rank up (rank r's Input to r+1's
// Work), then runs the same scan over ranks 1 … Size−1; rank 0 receives
// nothing.

// addMsg appends one message of n elements (an empty one when n is 0).
func (s *Schedule) addMsg(k Kind, b Buf, peer, off, n, chunk int) {
	if n == 0 {
		s.add(k, b, peer, off, 0)
		return
	}
	s.addChunked(k, b, peer, off, n, chunk)
}

// DirectAllGatherV: rank r's Input[0:counts[r]] lands at every rank's
// Work[displs[r]:]. Rank r's own block is the caller's to copy.
func DirectAllGatherV(rank, size int, counts, displs []int, chunk int) *Schedule {
	s := &Schedule{Rank: rank, Size: size}
	for k := 1; k < size; k++ {
		dst, src := mod(rank+k, size), mod(rank-k, size)
		s.addMsg(Send, Input, dst, 0, counts[rank], chunk)
		s.addMsg(Recv, Work, src, displs[src], counts[src], chunk)
	}
	return s.Finalize()
}

// DirectGatherV: rank r's Input[0:count] lands at root's
// Work[displs[r]:displs[r]+counts[r]] (counts and displs are root's;
// other ranks pass nil and their own count).
func DirectGatherV(rank, size, root, count int, counts, displs []int, chunk int) *Schedule {
	s := &Schedule{Rank: rank, Size: size}
	if rank != root {
		s.addMsg(Send, Input, root, 0, count, chunk)
	} else {
		for k := 1; k < size; k++ {
			src := mod(root+k, size)
			s.addMsg(Recv, Work, src, displs[src], counts[src], chunk)
		}
	}
	return s.Finalize()
}

// DirectScatterV: root's Input[displs[r]:displs[r]+counts[r]] lands at
// rank r's Work[0:count] (counts and displs are root's).
func DirectScatterV(rank, size, root, count int, counts, displs []int, chunk int) *Schedule {
	s := &Schedule{Rank: rank, Size: size}
	if rank != root {
		s.addMsg(Recv, Work, root, 0, count, chunk)
	} else {
		for k := 1; k < size; k++ {
			dst := mod(root+k, size)
			s.addMsg(Send, Input, dst, displs[dst], counts[dst], chunk)
		}
	}
	return s.Finalize()
}

// PairwiseAllToAllV: rank r's Input[sdispls[b]:+scounts[b]] lands at rank
// b's Work[rdispls[r]:+rcounts[r]]. Rank r's own block is the caller's.
func PairwiseAllToAllV(rank, size int, scounts, sdispls, rcounts, rdispls []int, chunk int) *Schedule {
	s := &Schedule{Rank: rank, Size: size}
	for k := 1; k < size; k++ {
		dst, src := mod(rank+k, size), mod(rank-k, size)
		s.addMsg(Send, Input, dst, sdispls[dst], scounts[dst], chunk)
		s.addMsg(Recv, Work, src, rdispls[src], rcounts[src], chunk)
	}
	return s.Finalize()
}

// HillisSteeleScan: Work[0:count] holds rank r's input and ends holding
// the reduction of ranks 0 … r.
func HillisSteeleScan(rank, size, count, chunk int) *Schedule {
	s := &Schedule{Rank: rank, Size: size}
	scanSteps(s, rank, 0, size, count, chunk)
	return s.Finalize()
}

// HillisSteeleExScan: Input[0:count] is rank r's input; Work[0:count] ends
// holding the reduction of ranks 0 … r−1 (untouched on rank 0).
func HillisSteeleExScan(rank, size, count, chunk int) *Schedule {
	s := &Schedule{Rank: rank, Size: size}
	if rank+1 < size {
		s.addMsg(Send, Input, rank+1, 0, count, chunk)
	}
	if rank > 0 {
		s.addMsg(Recv, Work, rank-1, 0, count, chunk)
		scanSteps(s, rank, 1, size, count, chunk)
	}
	return s.Finalize()
}

// scanSteps appends the Hillis–Steele steps over ranks first … size−1.
func scanSteps(s *Schedule, rank, first, size, count, chunk int) {
	s.reducing = true
	defer func() { s.reducing = false }()
	for d := 1; d < size-first; d <<= 1 {
		if rank+d < size {
			s.addMsg(Send, Work, rank+d, 0, count, chunk)
		}
		if rank-d >= first {
			s.addMsg(RecvReduce, Work, rank-d, 0, count, chunk)
		}
	}
}
