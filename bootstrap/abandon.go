package bootstrap

// Abandonment: a member that gives up on its world for a reason of its
// own (comm: its Init failed after the first world formed) tells the
// others, who report it on Failures as a failure, not as a leave.
//
// A leave (Close) is not a failure: the rank is done, and an operation
// that needs it fails with the transport's "closed" when it comes to it.
// But a rank whose Init fails (it cannot open its device, its context
// ends, its own connection to a peer fails) leaves a world the others are
// still setting up, and they would wait for it (for its dial, for Init's
// agreement) until their timeout, as ncclCommInitRank's callers do not
// when a rank aborts. So Abandon leaves as Close does, but with msgAbandon
// (the world's epoch and digest, the rank it blames, why) sent to every
// member of the world instead of msgLeaving, and the meta flags Leaving
// and Abandoned. A formed node reports the member on the message, at
// once, with an *AbandonError (ErrPeerAbandoned) inside the usual
// *OpError; where the message was lost, on its leave if the flag reached
// it (the rank it blames and the reason are then unknown; the flag alone
// does not report it: memberlist handles a meta update before a user
// message sent earlier, and the reason would be lost).
//
// Its process then ends, and a probe may find its gossip port refused
// before any of that reaches a node (load delays the message and the
// gossip). If the flag is in the view, the probe reports the abandonment
// (markGone); if nothing came yet, the member is reported as a death, and
// reported again with its *AbandonError when its message or its meta
// update comes (amendLocked): comm's Init then names its reason. A member
// locked on the world waits coordGrace before it gives up on a coordinator
// found dead (formloss.go): its abandonment proves the commit.
//
// A node still locked on that world, its commit not yet in, takes the
// message for the commit: only a formed member abandons its world, and a
// member forms only on the coordinator's commit, so the world was
// committed. It forms, and reports the member at install, as a node whose
// commit came first does. (It counted it as a loss of the first world
// before, and its Form failed: its Init then failed on the member's
// account of why, where the ranks whose commit came first found the cause
// themselves. Of 3 ranks, rank 2 with another GORUN_QUORUM, rank 1 read
// rank 0's "rank 2: invalid argument: ..." as "rank 0: peer gave up on
// the world" when memberlist, whose queue of user messages is a stack,
// handed it the abandonment before the commit on a loaded machine.)
//
// The blamed rank (Cause) is the rank that abandons when it gave up for a
// reason of its own, or the member whose failure made it give up: every
// rank whose Init fails abandons, so the others hear many, and Cause lets
// them name the first. Kind is the kind of its error, named by the layer
// above (comm: "invalid", "timeout", ...), so that the others' error is of
// the same kind as its own, not only in its words.

import (
	"bytes"
	"encoding/binary"
	"math"
	"unicode/utf8"
)

// AbandonError is the error of a member that abandoned the world
// (Node.Abandon): why, in its words, the kind of its error and the rank
// it blames. It unwraps to ErrPeerAbandoned.
type AbandonError struct {
	Cause  int    // the rank it blames: itself, or the member whose failure made it give up; -1 if not known
	Kind   string // the kind of its error, named by the layer above (at most 32 bytes); "" if none or not known
	Reason string // why; "" if not known (only the meta flag came)
}

func (e *AbandonError) Error() string {
	if e.Reason == "" {
		return ErrPeerAbandoned.Error()
	}
	return ErrPeerAbandoned.Error() + ": " + e.Reason
}

func (e *AbandonError) Unwrap() error { return ErrPeerAbandoned }

// maxReason bounds an abandonment's reason (the message's about field),
// maxKind its kind.
const (
	maxReason = 255
	maxKind   = 32
)

// Abandon closes the node as Close does, but tells the members of its
// world that this rank gives up on it (see above): they report it on
// Failures with an *AbandonError equal to why, not ErrPeerLeft. why.Cause
// is the rank this one blames (its own, when it gives up for a reason of
// its own), why.Kind the kind of its error (dropped if longer than 32
// bytes), why.Reason says why (cut to 255 bytes). Before the first world
// formed it is Close.
func (n *Node) Abandon(why AbandonError) error {
	if len(why.Reason) > maxReason {
		why.Reason = why.Reason[:maxReason]
		for !utf8.ValidString(why.Reason) {
			why.Reason = why.Reason[:len(why.Reason)-1]
		}
	}
	if len(why.Kind) > maxKind || !utf8.ValidString(why.Kind) {
		why.Kind = ""
	}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.mu.Unlock()
	n.stop(true, &why)
	return nil
}

// heardAbandon records the msgAbandon m: a member of this node's world,
// or of the world it is locked on, gives up on it.
func (n *Node) heardAbandon(m message) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.leaving[m.from] = true // tables leave it out, as a leaver (agree.go)
	n.ranPast = max(n.ranPast, m.epoch)
	e := &AbandonError{Cause: m.cause, Kind: m.errKind, Reason: m.about}
	old, had := n.abandoned[m.from]
	if !had || old.Reason == "" {
		n.abandoned[m.from] = e
	}
	n.viewMu.Lock()
	n.viewGen++
	n.outGen++
	n.viewMu.Unlock()
	if n.formed {
		if n.world.Epoch == m.epoch {
			if n.reported[m.from] && (!had || old.Reason == "" && e.Reason != "") {
				n.amendLocked(m.from) // reported before this came
			}
			n.reportLocked(m.from, true)
		}
		return
	}
	// Locked on the world it abandons, its commit not yet in: the world
	// was committed (see above). Form takes this for the commit, and
	// install reports the member.
	if d, ok := n.locked[m.epoch]; ok && d == m.digest {
		n.proven[m.epoch] = m.digest
	}
}

// heardAbandonFlagLocked records that member name, whose meta says it
// abandons (flag Abandoned), gave up on the world, for the cause, kind
// and reason its blob holds (abandonBlob) unless its message came first.
// n.mu is held.
func (n *Node) heardAbandonFlagLocked(name string, blob []byte) {
	if _, ok := n.abandoned[name]; !ok {
		n.abandoned[name] = abandonOfBlob(blob)
	}
	n.leaving[name] = true
}

// goneAbandonFlag records that member name, found gone (evidence.go) and
// kept out of the view, says in its meta that it abandoned the world
// (heardAbandonFlagLocked), and reports it again if it was reported
// before without its reason (amendLocked).
func (n *Node) goneAbandonFlag(name string, blob []byte) {
	n.mu.Lock()
	defer n.mu.Unlock()
	old, had := n.abandoned[name]
	if had && old.Reason != "" {
		return
	}
	delete(n.abandoned, name)
	n.heardAbandonFlagLocked(name, blob)
	if n.formed && n.reported[name] && (!had || n.abandoned[name].Reason != "") {
		n.amendLocked(name)
	}
}

// amendLocked reports again a member of the world that was reported
// before its abandonment reached this node (or only its flag, without a
// reason): its gossip port refused a connection, its process gone, before
// its msgAbandon and its meta update came, which load may delay
// (TestInitRankFailsAfterForm/rank=0/step=formed read "its gossip port
// refused a connection" without the reason, once). The second report's
// Err is the *AbandonError (Failures). n.mu is held.
func (n *Node) amendLocked(name string) {
	r, ok := n.inWorld[name]
	if !ok || n.closed {
		return
	}
	f := Failure{Rank: r, Epoch: n.world.Epoch, Name: name,
		Err: &OpError{Op: "gossip", Rank: n.world.Rank, Peer: r, Err: n.leftErrLocked(name)}}
	select {
	case n.failures <- f:
	default: // the buffer is full of reports: the first stays
	}
}

// abandonBlob is the meta blob of a node that abandons its world: the
// rank it blames (zig-zag varint), the kind of its error if it has one,
// and its reason. A leaving node's endpoints are of no more use, and the
// meta update that carries the flag is what the others may see first:
// msgAbandon, sent before it, is a UDP packet that load may delay or drop
// (TestInitRankFailsAfterForm under 3 busy loops read "peer gave up on the
// world" without the reason in 2 of 8 runs).
//
//	abandonMagic | cause | reason                        (no kind)
//	abandonKindMagic | cause | len(kind) kind | reason
func abandonBlob(ab *AbandonError) []byte {
	if ab.Kind == "" {
		return append(binary.AppendVarint([]byte(abandonMagic), int64(ab.Cause)), ab.Reason...)
	}
	b := binary.AppendVarint([]byte(abandonKindMagic), int64(ab.Cause))
	return append(appendString(b, ab.Kind), ab.Reason...)
}

// abandonMagic begins abandonBlob's blob, so that a build before it, whose
// abandoning node's blob still holds its endpoints, is not read as one.
// abandonKindMagic begins one with a kind: a build before Kind reads it as
// a blob it cannot read (no cause, no reason) rather than take the kind
// for part of the reason, and reads one without a kind as before.
const (
	abandonMagic     = "\xabA"
	abandonKindMagic = "\xabK"
)

// abandonOfBlob reads abandonBlob's blob; one it cannot read (from a build
// before it: the endpoints) gives no cause, no kind and no reason.
func abandonOfBlob(blob []byte) *AbandonError {
	unknown := &AbandonError{Cause: -1}
	rest, ok := bytes.CutPrefix(blob, []byte(abandonMagic))
	withKind := false
	if !ok {
		if rest, withKind = bytes.CutPrefix(blob, []byte(abandonKindMagic)); !withKind {
			return unknown
		}
	}
	cause, k := binary.Varint(rest)
	if k <= 0 || cause < -1 || cause > math.MaxInt32 {
		return unknown
	}
	d := decoder{buf: rest[k:]}
	var kind string
	if withKind {
		if kind = string(d.bytes(maxKind)); d.err != nil || kind == "" || !utf8.ValidString(kind) {
			return unknown
		}
	}
	if !utf8.Valid(d.buf) {
		return unknown
	}
	return &AbandonError{Cause: int(cause), Kind: kind, Reason: string(d.buf)}
}

// leftErrLocked is the error of a member of the world that left: an
// *AbandonError if it abandoned, else ErrPeerLeft. n.mu is held.
func (n *Node) leftErrLocked(name string) error {
	if e, ok := n.abandoned[name]; ok {
		return e
	}
	return ErrPeerLeft
}
