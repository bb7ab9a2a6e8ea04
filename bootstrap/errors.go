package bootstrap

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
)

// Errors of this package, wrapped in *OpError (or *FormError) so that
// errors.Is works.
var (
	ErrInvalidConfig = errors.New("invalid configuration")
	ErrMetaTooLarge  = errors.New("node metadata too large")
	ErrBadMeta       = errors.New("malformed node metadata")
	ErrMetaVersion   = errors.New("unsupported node metadata version")
	ErrNotFormed     = errors.New("world not formed")
	ErrNoSeed        = errors.New("no seed reachable")
	ErrClosed        = errors.New("bootstrap node closed")
	ErrPeerLeft      = errors.New("peer left the job")
	ErrPeerDead      = errors.New("peer failed (unreachable)")
	ErrPeerAbandoned = errors.New("peer gave up on the world") // see AbandonError
	ErrWrongJob      = errors.New("peer belongs to another job")
	ErrExpelled      = errors.New("this rank was declared dead and the job went on without it")
	ErrJobGone       = errors.New("every other rank of the job is gone: none is left to admit this restarted rank")
	// ErrPortInUse: Config.BindPort is held by another process on this
	// host (a port of 0 picks a free one and does not fail so).
	ErrPortInUse = errors.New("gossip port in use by another process")
)

// bindError is Start's error for a gossip transport that could not bind:
// ErrPortInUse where the port is taken (memberlist reports it in words
// alone: "bind: address already in use").
func bindError(port int, err error) error {
	if errors.Is(err, syscall.EADDRINUSE) || strings.Contains(err.Error(), "address already in use") {
		return fmt.Errorf("%w: port %d: %v", ErrPortInUse, port, err)
	}
	return err
}

// OpError is the error type of this package: which operation failed, on
// which rank (-1 if unassigned), and about which peer (-1 if none).
type OpError struct {
	Op   string // "join", "shrink", "meta", "close"
	Rank int    // the local rank, -1 if not (yet) assigned
	Peer int    // the peer rank concerned, -1 if none
	Err  error
}

func (e *OpError) Error() string {
	var b strings.Builder
	b.WriteString("bootstrap ")
	b.WriteString(e.Op)
	if e.Rank >= 0 {
		fmt.Fprintf(&b, " rank %d", e.Rank)
	}
	if e.Peer >= 0 {
		fmt.Fprintf(&b, " peer %d", e.Peer)
	}
	b.WriteString(": ")
	b.WriteString(e.Err.Error())
	return b.String()
}

func (e *OpError) Unwrap() error { return e.Err }

// FormError says why a world did not form in time: which ranks were seen
// and which are missing. It unwraps to ErrNotFormed and to the context's
// error (context.DeadlineExceeded or context.Canceled).
type FormError struct {
	JobID      string
	Size       int
	Epoch      uint32
	Seen       []int    // ranks seen alive (after deterministic assignment)
	Missing    []int    // ranks never seen
	Unassigned int      // members seen without a rank that got no slot yet
	Disagree   []int    // (coordinator only) ranks that did not propose or ack its view
	Notes      []string // e.g. members of the job with a different size
	Cause      error    // ctx.Err(), ErrClosed, ErrJobGone, or the *OpError of a rank that died or left while the first world formed
}

func (e *FormError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "bootstrap: job %q: world of %d (epoch %d) not formed: ", e.JobID, e.Size, e.Epoch)
	if len(e.Missing) > 0 {
		fmt.Fprintf(&b, "saw ranks %s, missing ranks %s", ranges(e.Seen), ranges(e.Missing))
	} else {
		fmt.Fprintf(&b, "all %d ranks seen but not agreed", e.Size)
		if len(e.Disagree) > 0 {
			fmt.Fprintf(&b, " (ranks %s have not confirmed the coordinator's view)", ranges(e.Disagree))
		}
	}
	if e.Unassigned > 0 {
		fmt.Fprintf(&b, "; %d unassigned members waiting", e.Unassigned)
	}
	for _, n := range e.Notes {
		b.WriteString("; ")
		b.WriteString(n)
	}
	if e.Cause != nil {
		b.WriteString(": ")
		b.WriteString(e.Cause.Error())
	}
	return b.String()
}

func (e *FormError) Unwrap() []error {
	if e.Cause == nil {
		return []error{ErrNotFormed}
	}
	return []error{ErrNotFormed, e.Cause}
}

// ranges prints sorted ints compactly: [0-3 5 7-9].
func ranges(xs []int) string {
	var b strings.Builder
	b.WriteByte('[')
	for i := 0; i < len(xs); {
		j := i
		for j+1 < len(xs) && xs[j+1] == xs[j]+1 {
			j++
		}
		if i > 0 {
			b.WriteByte(' ')
		}
		if j > i {
			fmt.Fprintf(&b, "%d-%d", xs[i], xs[j])
		} else {
			fmt.Fprintf(&b, "%d", xs[i])
		}
		i = j + 1
	}
	b.WriteByte(']')
	return b.String()
}
