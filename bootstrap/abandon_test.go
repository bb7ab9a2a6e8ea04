package bootstrap

import (
	"encoding/binary"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestAbandonedRankReported: a member that abandons the world is reported
// to the others as a failure with the rank it blames, the kind of its
// error and its reason, not as a leave (TestClosedRankReported).
func TestAbandonedRankReported(t *testing.T) {
	nodes := startWorld(t, "abandon", 3, nil)
	if err := nodes[1].Abandon(AbandonError{Cause: 2, Kind: "invalid", Reason: "its device failed"}); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(10 * time.Second)
	for r, n := range nodes {
		if r == 1 {
			continue
		}
		select {
		case f := <-n.Failures():
			var ab *AbandonError
			var oe *OpError
			if f.Rank != 1 || f.Epoch != 1 || !errors.As(f.Err, &ab) || !errors.Is(f.Err, ErrPeerAbandoned) || errors.Is(f.Err, ErrPeerLeft) {
				t.Fatalf("rank %d got failure %+v (%v), want rank 1 abandoned", r, f, f.Err)
			}
			if ab.Cause != 2 || ab.Kind != "invalid" || ab.Reason != "its device failed" || !errors.As(f.Err, &oe) || oe.Peer != 1 || oe.Rank != r {
				t.Errorf("rank %d: %v: cause %d, kind %q, reason %q", r, f.Err, ab.Cause, ab.Kind, ab.Reason)
			}
		case <-deadline:
			t.Fatalf("rank %d: no failure report for rank 1", r)
		}
	}
}

// TestAbandonReasonWithoutMessage: where msgAbandon does not arrive (a UDP
// packet, which load may delay or drop; here sent to no one), the others
// still learn the cause, the kind and the reason, from the meta update
// that carries the flag (abandonBlob). Before, they read "peer gave up on
// the world" with neither.
func TestAbandonReasonWithoutMessage(t *testing.T) {
	nodes := startWorld(t, "abandon-flag", 3, nil)
	n := nodes[1]
	n.mu.Lock()
	members := slices.Clone(n.world.Members)
	for i := range members {
		members[i].Addr = "127.0.0.1:9" // discard: msgAbandon reaches no member
	}
	n.world.Members = members
	n.mu.Unlock()
	if err := n.Abandon(AbandonError{Cause: 2, Kind: "timeout", Reason: "its device failed"}); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(10 * time.Second)
	for r, q := range nodes {
		if r == 1 {
			continue
		}
		select {
		case f := <-q.Failures():
			var ab *AbandonError
			if f.Rank != 1 || !errors.As(f.Err, &ab) || ab.Cause != 2 || ab.Kind != "timeout" || ab.Reason != "its device failed" {
				t.Errorf("rank %d got failure %+v (%v), want rank 1 abandoned blaming rank 2 for its device, kind timeout", r, f, f.Err)
			}
		case <-deadline:
			t.Fatalf("rank %d: no failure report for rank 1", r)
		}
	}
}

func TestAbandonBlob(t *testing.T) {
	for _, ab := range []AbandonError{{Cause: 3, Reason: "why"}, {Cause: -1}, {Cause: 1 << 30, Reason: strings.Repeat("ü", 127)},
		{Cause: 2, Kind: "invalid", Reason: "why"}, {Cause: -1, Kind: "timeout"}, {Cause: 1 << 30, Kind: strings.Repeat("k", maxKind), Reason: strings.Repeat("ü", 127)}} {
		blob := abandonBlob(&ab)
		if got := abandonOfBlob(blob); *got != ab {
			t.Errorf("%+v came back as %+v", ab, *got)
		}
		if len(blob) > MaxBlob {
			t.Errorf("%+v: blob of %d bytes, over MaxBlob", ab, len(blob))
		}
	}
	// A blob without a kind is the one builds before Kind write and read.
	if got, want := abandonBlob(&AbandonError{Cause: 3, Reason: "why"}), []byte(abandonMagic+"\x06why"); string(got) != string(want) {
		t.Errorf("blob without a kind: %x, want %x as before", got, want)
	}
	for _, blob := range [][]byte{nil, {0x80}, {4, 0xff, 0xfe}, []byte("blob 1"), binary.AppendVarint([]byte(abandonMagic), -2), []byte(abandonMagic + "\x04\xff"),
		[]byte(abandonKindMagic + "\x04"), []byte(abandonKindMagic + "\x04\x00why"), []byte(abandonKindMagic + "\x04\x05inv"), []byte(abandonKindMagic + "\x04\x02\xff\xfewhy"),
		append([]byte(abandonKindMagic+"\x04\x21"), strings.Repeat("k", 33)...)} {
		if got := abandonOfBlob(blob); *got != (AbandonError{Cause: -1}) {
			t.Errorf("blob %x read as %+v", blob, *got)
		}
	}
}

// TestAbandonBeforeCommitForms: a member locked on the first world that
// hears a member abandon it before the commit comes (late, or lost: here
// the member is cut off just before the coordinator commits) forms on it,
// and reports the member at install with its cause, kind and reason: only
// a formed member abandons, so the world was committed. Before, it counted
// the abandonment as a loss of the first world and its Form failed, where
// a member whose commit came first formed and found the cause itself
// (comm's TestQuorumMismatchAtInit: of 3 ranks, one whose commit came
// after rank 0's abandonment read rank 0's "peer gave up on the world",
// not ErrInvalid naming rank 2).
func TestAbandonBeforeCommitForms(t *testing.T) {
	nw := NewMemNetwork()
	ready := make(chan struct{})
	var nodes []*Node
	var injected atomic.Bool
	beforeCommit = func(n *Node, w *World) {
		<-ready
		if n != nodes[0] || w.Epoch != 1 || injected.Swap(true) {
			return
		}
		member := nodes[1]
		nw.Cut(member.Addr(), true) // the commit is lost
		bye := message{kind: msgAbandon, epoch: w.Epoch, digest: w.Digest, from: n.Name(), cause: 0, errKind: "invalid", about: "rank 1: invalid argument: its setting differs"}
		(&delegate{member}).NotifyMsg(bye.encode())
	}
	t.Cleanup(func() { beforeCommit = nil })
	var out []chan formResult
	nodes, out = formSome(t, nw, "abandon-before-commit", 2, []int{0, 1}, 20*time.Second, nil)
	close(ready)
	coord, member := <-out[0], <-out[1]
	if !injected.Load() {
		t.Fatal("the coordinator never came to commit")
	}
	if coord.err != nil {
		t.Fatalf("coordinator: %v", coord.err)
	}
	if member.err != nil || member.w.Epoch != 1 || member.w.Digest != coord.w.Digest || member.w.Rank != 1 {
		t.Fatalf("member: world %+v, %v; want the committed world of epoch 1 (it heard it abandoned before the commit)", member.w, member.err)
	}
	select {
	case f := <-nodes[1].Failures():
		var ab *AbandonError
		if f.Rank != 0 || !errors.As(f.Err, &ab) || ab.Cause != 0 || ab.Kind != "invalid" || ab.Reason != "rank 1: invalid argument: its setting differs" {
			t.Errorf("member: failure %+v (%v), want rank 0 abandoned, kind invalid, with its reason", f, f.Err)
		}
	default:
		t.Error("member: rank 0's abandonment not reported at install")
	}
}
