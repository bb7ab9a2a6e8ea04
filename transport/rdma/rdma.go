package rdma

import (
	"errors"
	"fmt"
)

// Access is the set of rights a memory region grants.
// Local read is always granted, as in verbs.
type Access uint32

const (
	AccessLocalWrite  Access = 1 << iota // the local adapter may write into it (receive, read target)
	AccessRemoteWrite                    // peers may write into it (PostWrite)
	AccessRemoteRead                     // peers may read from it (PostRead)
)

func (a Access) String() string {
	if a == 0 {
		return "none"
	}
	s := ""
	add := func(bit Access, name string) {
		if a&bit != 0 {
			if s != "" {
				s += "|"
			}
			s += name
		}
	}
	add(AccessLocalWrite, "local-write")
	add(AccessRemoteWrite, "remote-write")
	add(AccessRemoteRead, "remote-read")
	return s
}

// Flags control one work request, as ibv_send_flags do.
type Flags uint32

const (
	FlagSignaled Flags = 1 << iota // generate a completion on success
	FlagInline                     // copy the payload at post time; no MR needed
	FlagFence                      // wait for earlier reads to complete first
)

// Status is the outcome of a work request. The zero value is success.
type Status int

const (
	StatusSuccess              Status = iota
	StatusLocalLengthError            // receive buffer too small for the incoming send
	StatusLocalProtectionError        // local buffer not covered by a valid MR
	StatusRemoteAccessError           // bad rkey, out of bounds, or access not granted
	StatusRemoteInvalidRequest        // the target could not parse or serve the request
	StatusRNRRetryExceeded            // the peer had no receive posted, retries ran out
	StatusRetryExceeded               // the transport gave up (peer gone, link cut)
	StatusFlushed                     // the connection was in the error state or closed
	StatusFatal                       // anything else
)

var statusNames = [...]string{
	StatusSuccess:              "success",
	StatusLocalLengthError:     "local length error",
	StatusLocalProtectionError: "local protection error",
	StatusRemoteAccessError:    "remote access error",
	StatusRemoteInvalidRequest: "remote invalid request",
	StatusRNRRetryExceeded:     "receiver not ready, retries exceeded",
	StatusRetryExceeded:        "transport retries exceeded",
	StatusFlushed:              "flushed",
	StatusFatal:                "fatal error",
}

func (s Status) String() string {
	if s >= 0 && int(s) < len(statusNames) {
		return statusNames[s]
	}
	return fmt.Sprintf("status(%d)", int(s))
}

// Opcode says what kind of request a completion is for.
type Opcode int

const (
	OpSend         Opcode = iota // PostSend, PostSendv
	OpWrite                      // PostWrite, PostWritev, PostWriteImm
	OpRead                       // PostRead, PostReadv
	OpRecv                       // a receive consumed by a send
	OpRecvWriteImm               // a receive consumed by a write-with-immediate
)

var opcodeNames = [...]string{"send", "write", "read", "recv", "recv-write-imm"}

func (o Opcode) String() string {
	if o >= 0 && int(o) < len(opcodeNames) {
		return opcodeNames[o]
	}
	return fmt.Sprintf("opcode(%d)", int(o))
}

// WC is a work completion.
type WC struct {
	WRID    uint64 // the wrid given at post time
	Status  Status
	Opcode  Opcode
	ByteLen int    // bytes received (receive completions)
	Imm     uint32 // immediate data, valid when HasImm
	HasImm  bool
}

// Err returns nil for a successful completion and a *WCError otherwise.
func (wc WC) Err() error {
	if wc.Status == StatusSuccess {
		return nil
	}
	return &WCError{WC: wc}
}

// WCError is a failed completion as an error.
type WCError struct{ WC WC }

func (e *WCError) Error() string {
	return fmt.Sprintf("rdma: %s wrid %d: %s", e.WC.Opcode, e.WC.WRID, e.WC.Status)
}

// SGE is one entry of a scatter-gather list: a buffer and the MR covering it.
type SGE struct {
	Buf []byte
	MR  *MR
}

// Errors returned at post or setup time, wrapped in *OpError.
var (
	ErrNotConnected    = errors.New("not connected")
	ErrNotRegistered   = errors.New("buffer not covered by a registered memory region")
	ErrAccess          = errors.New("memory region lacks the required access")
	ErrClosed          = errors.New("closed")
	ErrNotSupported    = errors.New("not supported")
	ErrBusy            = errors.New("memory region in use by an outstanding request")
	ErrInvalid         = errors.New("invalid argument")
	ErrQueueFull       = errors.New("work queue full")
	ErrAuth            = errors.New("peer failed authentication")
	ErrUnknownProvider = errors.New("unknown provider")
	// ErrDeviceFailed is wrapped by Conn.Err and CQ.Err where this side's
	// own device failed them (a device that died, a port that went down,
	// a CQ that overran), not their peer: a user then blames its own
	// rank, not the peer's (verbs' asynchronous events).
	ErrDeviceFailed = errors.New("local device failed")
)

// OpError is the error type of this package and its providers.
type OpError struct {
	Op       string // e.g. "post_write", "dial", "register"
	Provider string
	Err      error
}

func (e *OpError) Error() string {
	return "rdma " + e.Provider + " " + e.Op + ": " + e.Err.Error()
}

func (e *OpError) Unwrap() error { return e.Err }

// NewOpError wraps err for provider prov and operation op.
func NewOpError(prov, op string, err error) error {
	if err == nil {
		return nil
	}
	return &OpError{Op: op, Provider: prov, Err: err}
}
