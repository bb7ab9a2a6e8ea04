package jobctl

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
)

// greeting is the first word of the server's greeting line.
const greeting = "gorun-jobctl 1"

// maxLine bounds one protocol line; reports are a few hundred bytes.
const maxLine = 4096

// Sentinel errors, wrapped in *OpError.
var (
	ErrAuth     = errors.New("jobctl: authentication failed")
	ErrProtocol = errors.New("jobctl: protocol error")
	ErrClosed   = errors.New("jobctl: closed")
)

// OpError records a failed control-channel operation and the peer involved.
type OpError struct {
	Op   string // "accept", "read", "listen", ...
	Peer string // remote address, or "" when not known
	Rank int    // the reporting rank, or -1 when not known
	Err  error
}

func (e *OpError) Error() string {
	s := "jobctl " + e.Op
	if e.Rank >= 0 {
		s += " rank " + strconv.Itoa(e.Rank)
	}
	if e.Peer != "" {
		s += " " + e.Peer
	}
	return s + ": " + e.Err.Error()
}

func (e *OpError) Unwrap() error { return e.Err }

// Report is one rank's state as sent over the wire.
type Report struct {
	Rank    int    `json:"rank"`
	Joined  bool   `json:"joined,omitempty"`
	Phase   string `json:"phase,omitempty"`
	Op      string `json:"op,omitempty"`
	Seq     uint64 `json:"seq,omitempty"`
	InOp    bool   `json:"in,omitempty"`
	SinceMS int64  `json:"since_ms,omitempty"` // time since the last Enter or Leave
	Done    bool   `json:"done,omitempty"`     // the client is closing
	// Blamed: an operation of this rank failed because of rank Cause (a
	// peer that failed, closed its communicator or aborted).
	Blamed bool `json:"blamed,omitempty"`
	Cause  int  `json:"cause,omitempty"`
	// Ping, when set, asks the server for the time (clock.go); the line
	// carries nothing else and changes no state.
	Ping int64 `json:"ping,omitempty"`
	// MetricsPort is where the rank serves its metrics (GORUN_METRICS_ADDR),
	// on the address it connects from.
	MetricsPort int `json:"metrics_port,omitempty"`
	// Poll asks the server to answer with the ranks that ended before
	// they joined (exits.go); the report is taken as any other.
	Poll bool `json:"poll,omitempty"`
}

// mac authenticates line number counter of a connection greeted with nonce.
func mac(token []byte, nonce string, counter uint64, payload []byte) string {
	h := hmac.New(sha256.New, token)
	fmt.Fprintf(h, "%s\n%d\n", nonce, counter)
	h.Write(payload)
	return hex.EncodeToString(h.Sum(nil))
}

// checkMAC reports whether got is the MAC of the line.
func checkMAC(token []byte, nonce string, counter uint64, payload []byte, got string) bool {
	want := mac(token, nonce, counter, payload)
	return hmac.Equal([]byte(want), []byte(got))
}
