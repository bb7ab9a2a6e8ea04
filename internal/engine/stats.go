package engine

// OpStats receives a few timestamps of one Run when a Call carries it
// (Call.Stats); a nil Stats costs one predictable branch per message. The
// timeline and the job report use it (internal/trace).
type OpStats struct {
	// FirstMsg is the time from the start of Run to the first message
	// consumed from a peer, in ns; -1 if none was.
	FirstMsg int64
	// Reduce is the time spent in reduction kernels, in ns.
	Reduce int64
	start  int64
}

func (s *OpStats) begin() { s.FirstMsg, s.Reduce, s.start = -1, 0, monoNow() }

// message notes a consumed message; it returns the time, for reduceDone.
func (s *OpStats) message() int64 {
	now := monoNow()
	if s.FirstMsg < 0 {
		s.FirstMsg = now - s.start
	}
	return now
}

// reduceDone adds the reduction that began at t.
func (s *OpStats) reduceDone(t int64) { s.Reduce += monoNow() - t }
