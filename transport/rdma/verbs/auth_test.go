package verbs

import (
	"bytes"
	"testing"
)

func TestAuthMessages(t *testing.T) {
	tok := []byte("job secret")
	ns, nc := newNonce(), newNonce()
	proof := authMsg{kind: authProof, nonceS: ns, nonceC: nc, mac: authMAC(tok, "client", ns, nc)}.encode()
	if len(proof) > 56 {
		t.Fatalf("proof is %d bytes; a connect request carries 56", len(proof))
	}
	m, ok := parseAuth(append(proof, 0, 0, 0)) // padded, as rdma_cm delivers it
	if !ok || m.kind != authProof || !bytes.Equal(m.nonceS, ns) || !bytes.Equal(m.nonceC, nc) ||
		!bytes.Equal(m.mac, authMAC(tok, "client", ns, nc)) {
		t.Fatalf("round trip: %+v %v", m, ok)
	}
	if bytes.Equal(authMAC(tok, "client", ns, nc), authMAC([]byte("other"), "client", ns, nc)) ||
		bytes.Equal(authMAC(tok, "client", ns, nc), authMAC(tok, "server", ns, nc)) {
		t.Fatal("MACs do not depend on the token and label")
	}
	for _, bad := range [][]byte{nil, make([]byte, 56), []byte("GRV1"), []byte("GRV1P short"), []byte("GRV1?")} {
		if _, ok := parseAuth(bad); ok {
			t.Errorf("parseAuth(%q) accepted", bad)
		}
	}
	if m, ok := parseAuth(authMsg{kind: authRefused}.encode()); !ok || m.kind != authRefused {
		t.Error("refusal does not parse")
	}
}

func TestChallenges(t *testing.T) {
	var c challenges
	n := c.issue()
	if !c.take(n) {
		t.Fatal("issued nonce not accepted")
	}
	if c.take(n) {
		t.Fatal("nonce accepted twice")
	}
	if c.take(newNonce()) {
		t.Fatal("unknown nonce accepted")
	}
	for i := 0; i < maxChallenge-1; i++ {
		c.issue()
	}
	if c.issue() == nil {
		t.Fatal("issue refused below the cap")
	}
	if c.issue() != nil {
		t.Fatal("issue beyond the cap")
	}
}
