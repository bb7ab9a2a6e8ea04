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
		m := message{kind: kind, epoch: 1<<32 - 1, digest: [digestLen]byte{9, 8, 7}, from: "r12-0123456789ab", seq: 1<<64 - 1}
		if hasAbout(kind) {
			m.about = "r3-ba9876543210"
		}
		if kind == msgAbandon {
			m.cause = 1<<31 - 1
			// Without a kind it is what builds before errKind send and read.
			old := m.encode()
			m.errKind = "invalid"
			if got, ok := decodeMessage(old); !ok || got.errKind != "" || got.cause != m.cause || got.seq != m.seq {
				t.Errorf("msgAbandon without a kind: %+v, %v", got, ok)
			}
			if withKind := m.encode(); string(withKind[:len(old)]) != string(old) {
				t.Errorf("msgAbandon's kind is not appended: %x, before %x", withKind, old)
			}
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
	for _, bad := range [][]byte{nil, {0}, {6}, {msgPropose}, {msgHello}, {msgAbandon + 1}, (&message{kind: msgTable, from: "x"}).encode(), append((&message{kind: msgAck, from: "x"}).encode(), 0),
		append((&message{kind: msgAbandon, from: "x"}).encode(), 0), append((&message{kind: msgAbandon, from: "x"}).encode(), 1)} {
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

// memberlist hands a node's waiting user messages to NotifyMsg newest
// first: a member's proposal of the table it derived before it knew of a
// death came after its proposal without the dead, and replaced it, and
// the coordinator waited for the resend (200 ms; in-process 4-rank
// shrinks after a kill took a median of 201 ms, 2 ms since). Of a
// sender's proposals, acks and prepares of an epoch the newest (by seq)
// stays, whatever the order they come in; other senders, epochs and kinds
// are apart.
func TestNotifyMsgKeepsNewest(t *testing.T) {
	nodes := startWorld(t, "msg-newest", 2, nil)
	n := nodes[0]
	d := &delegate{n}
	older, newer := [digestLen]byte{1}, [digestLen]byte{2}
	for _, kind := range []byte{msgPropose, msgAck, msgPrepare} {
		const epoch = 7
		m := message{kind: kind, epoch: epoch, from: "r1-x"}
		m.digest, m.seq = newer, 11
		d.NotifyMsg(m.encode())
		m.digest, m.seq = older, 10
		d.NotifyMsg(m.encode())
		other := message{kind: kind, epoch: epoch + 1, from: "r1-x", digest: older, seq: 9} // another epoch
		d.NotifyMsg(other.encode())
		n.mu.Lock()
		var got, gotOther [digestLen]byte
		switch kind {
		case msgPropose:
			got, gotOther = n.proposals[epoch]["r1-x"], n.proposals[epoch+1]["r1-x"]
		case msgAck:
			got, gotOther = n.acks[epoch]["r1-x"], n.acks[epoch+1]["r1-x"]
		case msgPrepare:
			got, gotOther = n.prepares[epoch].digest, n.prepares[epoch+1].digest
		}
		n.mu.Unlock()
		if got != newer || gotOther != older {
			t.Errorf("kind %d: kept %x and %x (epoch %d), want %x and %x", kind, got[:1], gotOther[:1], epoch+1, newer[:1], older[:1])
		}
	}
}
