package verbs

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"sync"
	"time"
)

// Connection authentication with Config.Token, carried in rdma_cm private
// data (a connect request holds at most 56 bytes of it), challenge-response,
// the token never sent:
//
//  1. the client connects with no proof; the server rejects the request
//     with a challenge (authChallenge + a fresh nonceS) in the reject's
//     private data;
//  2. the client connects again with authProof: nonceS, its own nonceC and
//     MAC(token, "client", nonceS, nonceC);
//  3. the server checks that it issued nonceS (once: it is consumed) and
//     the MAC, and accepts with authAccept: MAC(token, "server", nonceC,
//     nonceS); the client checks that before Dial returns.
//
// A server without a token accepts plain requests, so a client with one
// fails (ErrAuth: no proof from the server); a client without a token that
// meets a challenge fails too. The MACs are HMAC-SHA256 cut to 16 bytes.
const (
	authMagic     = "GRV1"
	nonceLen      = 16
	macLen        = 16
	authChallenge = 'C'
	authProof     = 'P'
	authAccept    = 'A'
	authRefused   = 'X'
)

type authMsg struct {
	kind           byte
	nonceS, nonceC []byte
	mac            []byte
}

func authMAC(token []byte, label string, a, b []byte) []byte {
	h := hmac.New(sha256.New, token)
	h.Write([]byte(label))
	h.Write(a)
	h.Write(b)
	return h.Sum(nil)[:macLen]
}

func newNonce() []byte {
	b := make([]byte, nonceLen)
	if _, err := rand.Read(b); err != nil {
		panic("verbs: crypto/rand failed: " + err.Error()) // the runtime guarantees it does not
	}
	return b
}

func (m authMsg) encode() []byte {
	b := append([]byte(authMagic), m.kind)
	b = append(b, m.nonceS...)
	b = append(b, m.nonceC...)
	return append(b, m.mac...)
}

// parseAuth decodes private data; ok is false for anything else (including
// the zero padding a peer without authentication sends).
func parseAuth(p []byte) (m authMsg, ok bool) {
	if len(p) < len(authMagic)+1 || string(p[:len(authMagic)]) != authMagic {
		return m, false
	}
	m.kind, p = p[len(authMagic)], p[len(authMagic)+1:]
	take := func(n int) []byte {
		if len(p) < n {
			ok = false
			return nil
		}
		b := p[:n:n]
		p = p[n:]
		return b
	}
	ok = true
	switch m.kind {
	case authChallenge:
		m.nonceS = take(nonceLen)
	case authProof:
		m.nonceS, m.nonceC, m.mac = take(nonceLen), take(nonceLen), take(macLen)
	case authAccept:
		m.mac = take(macLen)
	case authRefused:
	default:
		ok = false
	}
	return m, ok
}

// challenges are the nonces a listener issued and not yet seen back.
type challenges struct {
	mu sync.Mutex
	m  map[string]time.Time
}

const (
	challengeTTL = 30 * time.Second
	maxChallenge = 4096
)

// issue returns a fresh nonce, or nil when too many are outstanding.
func (c *challenges) issue() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if c.m == nil {
		c.m = map[string]time.Time{}
	}
	if len(c.m) >= maxChallenge {
		for k, exp := range c.m {
			if now.After(exp) {
				delete(c.m, k)
			}
		}
		if len(c.m) >= maxChallenge {
			return nil
		}
	}
	n := newNonce()
	c.m[string(n)] = now.Add(challengeTTL)
	return n
}

// take consumes nonce; false if it was never issued, expired or used.
func (c *challenges) take(nonce []byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	exp, ok := c.m[string(nonce)]
	delete(c.m, string(nonce))
	return ok && time.Now().Before(exp)
}
