package trace

// Kind says what an Event is.
type Kind uint8

const (
	// KindOp is one collective or point-to-point operation of a
	// communicator: Name, Algo, Seq, Bytes, Start, End, Wait, Reduce.
	KindOp Kind = iota + 1
	// KindSpan is a span of work that is not an operation (a ddp bucket's
	// allreduce, a user's compute): Name, Arg, Start, End.
	KindSpan
	// KindInstant is a point in time (a gradient ready): Name, Arg, Start.
	KindInstant
)

// Event is one record of the timeline. Times are Now's nanoseconds.
type Event struct {
	Kind  Kind
	Err   bool   // the operation failed
	Lane  uint16 // see Recorder.Lane; 0 is the world communicator
	Seq   uint32 // the operation's sequence number in its communicator
	Name  string // "allreduce", "bucket", "backward", ...
	Algo  string // the algorithm that ran the operation
	Bytes int64  // the operation's payload (the work buffer)
	Arg   int64  // a span's or instant's argument (bucket index, parameter); an operation's peer (send, recv)
	Start int64
	End   int64
	// Wait is the time from Start to the first message from a peer (-1:
	// none arrived); Reduce the time spent in reduction kernels. The rest
	// of End-Start is transfer: posting, copying and waiting on the wire.
	Wait, Reduce int64
}
