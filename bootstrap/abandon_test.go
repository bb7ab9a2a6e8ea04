package bootstrap

import (
	"encoding/binary"
	"errors"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
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
	nodes, out, committed := formLosingCommit(t, "abandon-before-commit", 20*time.Second, func(n, member *Node, w *World, _ []chan formResult) {
		bye := message{kind: msgAbandon, epoch: w.Epoch, digest: w.Digest, from: n.Name(), cause: 0, errKind: "invalid", about: "rank 1: invalid argument: its setting differs"}
		(&delegate{member}).NotifyMsg(bye.encode())
	})
	coord, member := <-out[0], <-out[1]
	if !committed() {
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

// TestAbandonFlagThenRefused: a member whose meta update saying that it
// abandons (with its cause, kind and reason: abandonBlob) reached the
// others, but neither its msgAbandon nor its leave, then ends: a probe of
// its gossip port is refused. Its report must carry its reason, which the
// view holds; it read "its gossip port refused a connection" alone
// (TestInitRankFailsAfterForm/rank=0/step=formed under load, once).
func TestAbandonFlagThenRefused(t *testing.T) {
	nw := NewMemNetwork()
	nodes := startWorld(t, "abandon-refused", 2, func(_ int, c *Config) { slowGossip(0, c); c.Network = nw })
	defer closeAll(nodes)
	n := nodes[1]
	n.metaMu.Lock()
	n.meta.Leaving, n.meta.Abandoned = true, true
	n.meta.Blob = abandonBlob(&AbandonError{Cause: 1, Kind: "invalid", Reason: "its device failed"})
	buf, err := n.meta.encode()
	if err != nil {
		t.Fatal(err)
	}
	n.metaBuf = buf
	n.metaMu.Unlock()
	if err := n.ml.UpdateNode(time.Second); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		nodes[0].viewMu.Lock()
		q := nodes[0].peers[n.Name()]
		nodes[0].viewMu.Unlock()
		if q.meta.Abandoned {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("rank 0 never saw rank 1's meta update")
		}
	}
	n.shutdown(false) // no msgAbandon, no leave: its port now refuses
	nodes[0].Suspect(1)
	select {
	case f := <-nodes[0].Failures():
		var ab *AbandonError
		if f.Rank != 1 || !errors.As(f.Err, &ab) || ab.Cause != 1 || ab.Kind != "invalid" || ab.Reason != "its device failed" {
			t.Errorf("rank 0 got failure %+v (%v), want rank 1 abandoned, kind invalid, for its device", f, f.Err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("rank 0: no failure report for rank 1")
	}
}

// TestAbandonAfterRefused: a member whose process ended before its
// msgAbandon, its meta update or its leave reached the others (load
// delays them) is reported for its refused port; when its abandonment
// comes after, by the message or by the meta update (kept out of the view,
// found gone), it is reported again with its cause, kind and reason.
// Before, the first report stayed the only one, and Init's error said
// "its gossip port refused a connection" alone
// (TestInitRankFailsAfterForm/rank=0/step=formed, once, under load).
func TestAbandonAfterRefused(t *testing.T) {
	why := AbandonError{Cause: 1, Kind: "invalid", Reason: "its device failed"}
	for _, tc := range []struct {
		name string
		hear func(d *delegate, name string)
	}{
		{"message", func(d *delegate, name string) {
			d.NotifyMsg((&message{kind: msgAbandon, epoch: 1, from: name, about: why.Reason, cause: why.Cause, errKind: why.Kind, seq: 1}).encode())
		}},
		{"meta", func(d *delegate, name string) {
			m := meta{Rank: 1, Size: 2, JobID: d.n.cfg.JobID, Leaving: true, Abandoned: true, Blob: abandonBlob(&why)}
			buf, err := m.encode()
			if err != nil {
				t.Fatal(err)
			}
			d.update(&memberlist.Node{Name: name, Addr: net.IPv4(127, 0, 0, 1), Port: 9, Meta: buf})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nw := NewMemNetwork()
			nodes := startWorld(t, "abandon-late-"+tc.name, 2, func(_ int, c *Config) { slowGossip(0, c); c.Network = nw })
			defer closeAll(nodes)
			name := nodes[1].Name()
			nodes[1].shutdown(false) // ends before a word of its abandonment
			nodes[0].Suspect(1)
			next := func() Failure {
				t.Helper()
				select {
				case f := <-nodes[0].Failures():
					return f
				case <-time.After(10 * time.Second):
					t.Fatal("rank 0: no failure report for rank 1")
				}
				return Failure{}
			}
			if f := next(); f.Rank != 1 || !errors.Is(f.Err, errRefused) {
				t.Fatalf("rank 0's first report %+v (%v), want rank 1's refused port", f, f.Err)
			}
			tc.hear(&delegate{nodes[0]}, name)
			var ab *AbandonError
			if f := next(); f.Rank != 1 || f.Epoch != 1 || !errors.As(f.Err, &ab) || *ab != why {
				t.Errorf("rank 0's second report %+v (%v), want rank 1 abandoned, kind invalid, for its device", f, f.Err)
			}
			tc.hear(&delegate{nodes[0]}, name) // once
			select {
			case f := <-nodes[0].Failures():
				t.Errorf("rank 0: a third report %+v (%v)", f, f.Err)
			default:
			}
		})
	}
}

// TestAbandonAfterCoordinatorRefusedForms: as TestAbandonBeforeCommitForms,
// but the member finds the coordinator gone (its gossip port refused: it
// formed, gave up and ended) before its abandonment comes, 150 ms later.
// The member must still form on the world and report the coordinator's
// reason. Before, its Form failed at once on the refused port, "rank 0
// died while the world formed", without the reason
// (TestInitRankFailsAfterForm/rank=0/step=formed under -race, once).
func TestAbandonAfterCoordinatorRefusedForms(t *testing.T) {
	var early *formResult // the member's Form, if it ended before the abandonment came
	const reason = "rank 0: invalid argument: its device failed"
	nodes, out, committed := formLosingCommit(t, "abandon-refused-coord", 20*time.Second, func(n, member *Node, w *World, out []chan formResult) {
		member.mu.Lock()
		member.refused[n.Name()] = true // a probe found its port refused
		member.mu.Unlock()
		member.markGone(n.Name())
		select {
		case r := <-out[1]:
			early = &r
		case <-time.After(150 * time.Millisecond): // its word is that late
		}
		bye := message{kind: msgAbandon, epoch: w.Epoch, digest: w.Digest, from: n.Name(), cause: 0, errKind: "invalid", about: reason}
		(&delegate{member}).NotifyMsg(bye.encode())
	})
	coord := <-out[0]
	if !committed() {
		t.Fatal("the coordinator never came to commit")
	}
	if coord.err != nil {
		t.Fatalf("coordinator: %v", coord.err)
	}
	member := early
	if member == nil {
		r := <-out[1]
		member = &r
	}
	if member.err != nil || member.w.Epoch != 1 || member.w.Digest != coord.w.Digest || member.w.Rank != 1 {
		t.Fatalf("member: world %+v, %v; want the committed world of epoch 1 (its coordinator abandoned it)", member.w, member.err)
	}
	select {
	case f := <-nodes[1].Failures():
		var ab *AbandonError
		if f.Rank != 0 || !errors.As(f.Err, &ab) || ab.Kind != "invalid" || ab.Reason != reason {
			t.Errorf("member: failure %+v (%v), want rank 0 abandoned, kind invalid, with its reason", f, f.Err)
		}
	default:
		t.Error("member: rank 0's abandonment not reported at install")
	}
}
