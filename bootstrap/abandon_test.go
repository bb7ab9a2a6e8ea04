package bootstrap

import (
	"encoding/binary"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestAbandonedRankReported: a member that abandons the world is reported
// to the others as a failure with the rank it blames and its reason, not
// as a leave (TestClosedRankReported).
func TestAbandonedRankReported(t *testing.T) {
	nodes := startWorld(t, "abandon", 3, nil)
	if err := nodes[1].Abandon(2, "its device failed"); err != nil {
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
			if ab.Cause != 2 || ab.Reason != "its device failed" || !errors.As(f.Err, &oe) || oe.Peer != 1 || oe.Rank != r {
				t.Errorf("rank %d: %v: cause %d, reason %q", r, f.Err, ab.Cause, ab.Reason)
			}
		case <-deadline:
			t.Fatalf("rank %d: no failure report for rank 1", r)
		}
	}
}

// TestAbandonReasonWithoutMessage: where msgAbandon does not arrive (a UDP
// packet, which load may delay or drop; here sent to no one), the others
// still learn the cause and the reason, from the meta update that carries
// the flag (abandonBlob). Before, they read "peer gave up on the world"
// with neither.
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
	if err := n.Abandon(2, "its device failed"); err != nil {
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
			if f.Rank != 1 || !errors.As(f.Err, &ab) || ab.Cause != 2 || ab.Reason != "its device failed" {
				t.Errorf("rank %d got failure %+v (%v), want rank 1 abandoned blaming rank 2 for its device", r, f, f.Err)
			}
		case <-deadline:
			t.Fatalf("rank %d: no failure report for rank 1", r)
		}
	}
}

func TestAbandonBlob(t *testing.T) {
	for _, ab := range []AbandonError{{Cause: 3, Reason: "why"}, {Cause: -1}, {Cause: 1 << 30, Reason: strings.Repeat("ü", 127)}} {
		if got := abandonOfBlob(abandonBlob(&ab)); *got != ab {
			t.Errorf("%+v came back as %+v", ab, *got)
		}
	}
	for _, blob := range [][]byte{nil, {0x80}, {4, 0xff, 0xfe}, []byte("blob 1"), binary.AppendVarint([]byte(abandonMagic), -2), []byte(abandonMagic + "\x04\xff")} {
		if got := abandonOfBlob(blob); *got != (AbandonError{Cause: -1}) {
			t.Errorf("blob %x read as %+v", blob, *got)
		}
	}
}
