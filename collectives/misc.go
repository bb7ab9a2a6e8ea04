package collectives

// Bruck allgather, dissemination barrier and the direct (linear) schedules.
//
// Bruck: blocks sit at their final offsets (block b at b·count). At step
// d = 1, 2, 4, ... < Size rank r holds blocks r .. r+d-1 (mod Size); it sends
// the first min(d, Size-d) of them to r-d and receives as many starting at
// block r+d from r+d. ceil(log2 Size) steps for any Size.
//
// Dissemination barrier: at step d = 1, 2, 4, ... < Size rank r signals r+d
// and waits for r-d; step k's signal is sent only after step k-1's arrived,
// so after the last step every rank has heard, transitively, from all.
//
// Gather, scatter and all-to-all are direct: each pair exchanges its block
// once (all-to-all in the order r+k / r-k, k = 1..Size-1, so that no two
// ranks target the same peer at the same step).

// BruckAllGather: Work holds size blocks of count elements; rank r starts
// with block r.
func BruckAllGather(rank, size, count, chunk int) *Schedule {
	s := &Schedule{Rank: rank, Size: size}
	for d := 1; d < size; d <<= 1 {
		nb := min(d, size-d)
		to, from := mod(rank-d, size), mod(rank+d, size)
		blockRange(s, Send, to, rank, nb, size, count, chunk)
		blockRange(s, Recv, from, rank+d, nb, size, count, chunk)
	}
	return s.Finalize()
}

// blockRange appends ops for blocks first .. first+nb-1 (mod size), split
// where the range wraps.
func blockRange(s *Schedule, k Kind, peer, first, nb, size, count, chunk int) {
	first = mod(first, size)
	a := min(nb, size-first)
	s.addChunked(k, Work, peer, first*count, a*count, chunk)
	if nb > a {
		s.addChunked(k, Work, peer, 0, (nb-a)*count, chunk)
	}
}

// DisseminationBarrier: zero-length messages in ceil(log2 Size) rounds;
// in round k rank r sends to r+2^k and receives from r-2^k. A round's
// send waits for every earlier round's receive, not the previous one's
// alone: a schedule's receives run concurrently, and a send after one
// receive carries only what that receive's sender knew, so with 6 ranks
// rank 1 could complete without rank 2 (TestBarrierCausality).
func DisseminationBarrier(rank, size int) *Schedule {
	s := &Schedule{Rank: rank, Size: size}
	var recvs []int
	for d := 1; d < size; d <<= 1 {
		i := s.add(Send, Work, mod(rank+d, size), 0, 0)
		for _, j := range recvs {
			s.After(i, j)
		}
		recvs = append(recvs, s.add(Recv, Work, mod(rank-d, size), 0, 0))
	}
	return s.Finalize()
}

// DirectGather: rank r's Input[0:count] lands at root's Work[r·count:].
func DirectGather(rank, size, root, count, chunk int) *Schedule {
	s := &Schedule{Rank: rank, Size: size}
	if rank != root {
		s.addChunked(Send, Input, root, 0, count, chunk)
	} else {
		for k := 1; k < size; k++ {
			src := mod(root+k, size)
			s.addChunked(Recv, Work, src, src*count, count, chunk)
		}
	}
	return s.Finalize()
}

// DirectScatter: root's Input[r·count:] lands at rank r's Work[0:count].
func DirectScatter(rank, size, root, count, chunk int) *Schedule {
	s := &Schedule{Rank: rank, Size: size}
	if rank != root {
		s.addChunked(Recv, Work, root, 0, count, chunk)
	} else {
		for k := 1; k < size; k++ {
			dst := mod(root+k, size)
			s.addChunked(Send, Input, dst, dst*count, count, chunk)
		}
	}
	return s.Finalize()
}

// PairwiseAllToAll: block b of rank r's Input lands at rank b's Work block r.
func PairwiseAllToAll(rank, size, count, chunk int) *Schedule {
	s := &Schedule{Rank: rank, Size: size}
	for k := 1; k < size; k++ {
		dst, src := mod(rank+k, size), mod(rank-k, size)
		for p := 0; p < count; p += chunk {
			n := min(chunk, count-p)
			s.add(Send, Input, dst, dst*count+p, n)
			s.add(Recv, Work, src, src*count+p, n)
		}
	}
	return s.Finalize()
}

// DirectSendRecv: a point-to-point message as a one-op schedule.
func DirectSendRecv(rank, size, peer int, send bool, count, chunk int) *Schedule {
	s := &Schedule{Rank: rank, Size: size}
	if send {
		s.addChunked(Send, Input, peer, 0, count, chunk)
	} else {
		s.addChunked(Recv, Work, peer, 0, count, chunk)
	}
	if count == 0 {
		if send {
			s.add(Send, Input, peer, 0, 0)
		} else {
			s.add(Recv, Work, peer, 0, 0)
		}
	}
	return s.Finalize()
}
