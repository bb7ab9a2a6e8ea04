package collectives

// GroupMsg is one point-to-point message of a group: a send from Input or
// a receive into Work of Len bytes at byte offset Off, cut into pieces of
// Chunk bytes as DirectSendRecv would cut it on its own.
type GroupMsg struct {
	Send            bool
	Peer            int
	Off, Len, Chunk int
}

// GroupSendRecv is the schedule of a group of point-to-point messages run
// as one call over bytes (the call's DType is Uint8): message i's ops carry
// Sig i+1, so each is sent and checked with its own signature
// (Call.Sigs[i]). Every message is a separate op chain, so the group's
// sends and receives progress together: two ranks that each send the other
// a large message before receiving complete, as MPI's Isend/Irecv do. On
// the wire each message is exactly what DirectSendRecv would send, so a
// rank that runs the same messages one call at a time is its match.
func GroupSendRecv(rank, size int, msgs []GroupMsg) *Schedule {
	s := &Schedule{Rank: rank, Size: size}
	for i, m := range msgs {
		k, b := Recv, Work
		if m.Send {
			k, b = Send, Input
		}
		first := len(s.Ops)
		if m.Len == 0 {
			s.add(k, b, m.Peer, m.Off, 0)
		} else {
			s.addChunked(k, b, m.Peer, m.Off, m.Len, max(1, m.Chunk))
		}
		for j := first; j < len(s.Ops); j++ {
			s.Ops[j].Sig = int32(i + 1)
		}
	}
	return s.Finalize()
}
