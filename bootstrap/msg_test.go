package bootstrap

import (
	"bytes"
	"testing"
)

func TestMessageRoundTrip(t *testing.T) {
	for kind := byte(msgPropose); kind <= msgAbandon; kind++ {
		if kind == msgTable || kind == msgHello {
			continue
		}
		m := message{kind: kind, epoch: 1<<32 - 1, digest: [digestLen]byte{9, 8, 7}, from: "r12-0123456789ab"}
		if hasAbout(kind) {
			m.about = "r3-ba9876543210"
		}
		if kind == msgAbandon {
			m.cause = 1<<31 - 1
		}
		got, ok := decodeMessage(m.encode())
		if !ok || got != m {
			t.Errorf("round trip of %+v: %+v, %v", m, got, ok)
		}
		// Each kind has one decoder: a message is never taken for a
		// table prepare (msgStopped and msgTable once shared a byte,
		// and NotifyMsg dropped every msgStopped as a bad table).
		if isTable(m.encode()) || isHello(m.encode()) {
			t.Errorf("kind %d is routed as a table prepare or a hello", kind)
		}
	}
	for _, bad := range [][]byte{nil, {0}, {6}, {msgPropose}, {msgHello}, {msgAbandon + 1}, (&message{kind: msgTable, from: "x"}).encode(), append((&message{kind: msgAck, from: "x"}).encode(), 0)} {
		if _, ok := decodeMessage(bad); ok {
			t.Errorf("decodeMessage(%x) accepted", bad)
		}
	}
}

// FuzzMessage: no input crashes the agreement message decoder, and what
// decodes re-encodes to the same bytes.
func FuzzMessage(f *testing.F) {
	f.Add((&message{kind: msgCommit, epoch: 2, from: "r0-abc"}).encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		m, ok := decodeMessage(b)
		if ok && !bytes.Equal(m.encode(), b) {
			t.Fatalf("not canonical: %x re-encodes to %x", b, m.encode())
		}
	})
}
