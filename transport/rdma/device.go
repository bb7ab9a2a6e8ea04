package rdma

import (
	"context"
	"net"
	"sort"
	"sync"
	"time"
)

// Device is an opened provider: a protection domain plus a way to connect.
type Device interface {
	// Name is the provider name ("tcp", "shm", "mem", "verbs").
	Name() string
	// Register makes buf usable by this device's connections with the given
	// access. Go memory is pinned until Deregister. An empty buf is
	// ErrInvalid on every provider (as ibv_reg_mr); zero-byte transfers
	// take a nil MR.
	Register(buf []byte, access Access) (*MR, error)
	// Alloc returns n bytes of page-aligned memory outside the Go heap
	// (mmap), locked and placed on the NUMA node local to the device, and
	// registered with access. Deregister frees it. n ≤ 0 is ErrInvalid.
	Alloc(n int, access Access) (*MR, error)
	Listen(ctx context.Context, addr string) (Listener, error)
	// Dial is DialQP with private completion queues.
	Dial(ctx context.Context, addr string) (Conn, error)
	// CreateCQ makes a completion queue that connections of this device
	// may share (see CQ). depth sizes it where the provider needs a bound
	// (verbs); 0 means a default large enough for SendQueueDepth plus
	// RecvQueueDepth of several connections.
	CreateCQ(depth int) (CQ, error)
	// DialQP connects to addr with the completion queues of init.
	DialQP(ctx context.Context, addr string, init QPInit) (Conn, error)
	// Close closes every connection and listener and deregisters every MR.
	Close() error
}

// Listener accepts connections; Addr().String() is what peers pass to Dial.
type Listener interface {
	// Accept is AcceptQP with private completion queues.
	Accept(ctx context.Context) (Conn, error)
	// AcceptQP accepts a connection with the completion queues of init.
	AcceptQP(ctx context.Context, init QPInit) (Conn, error)
	Addr() net.Addr
	Close() error
}

// Conn is a connected reliable queue pair.
type Conn interface {
	RegMsgs(buf []byte) (*MR, error)  // rdma_reg_msgs: AccessLocalWrite
	RegWrite(buf []byte) (*MR, error) // rdma_reg_write: AccessLocalWrite|AccessRemoteWrite
	RegRead(buf []byte) (*MR, error)  // rdma_reg_read: AccessLocalWrite|AccessRemoteRead

	PostSend(wrid uint64, buf []byte, mr *MR, flags Flags) error
	PostSendv(wrid uint64, sgl []SGE, flags Flags) error
	PostRecv(wrid uint64, buf []byte, mr *MR) error
	PostRecvv(wrid uint64, sgl []SGE) error
	PostWrite(wrid uint64, buf []byte, mr *MR, flags Flags, remoteAddr uint64, rkey uint32) error
	PostWritev(wrid uint64, sgl []SGE, flags Flags, remoteAddr uint64, rkey uint32) error
	// PostWriteImm writes like PostWrite, then consumes a receive on the
	// peer whose completion is OpRecvWriteImm with HasImm, Imm and ByteLen.
	PostWriteImm(wrid uint64, buf []byte, mr *MR, flags Flags, remoteAddr uint64, rkey uint32, imm uint32) error
	PostRead(wrid uint64, buf []byte, mr *MR, flags Flags, remoteAddr uint64, rkey uint32) error
	PostReadv(wrid uint64, sgl []SGE, flags Flags, remoteAddr uint64, rkey uint32) error

	// GetSendComp returns the next send-queue completion. The error is
	// non-nil only when no completion can come (ctx done, conn closed).
	GetSendComp(ctx context.Context) (WC, error)
	// GetRecvComp returns the next receive completion.
	GetRecvComp(ctx context.Context) (WC, error)

	// MaxInline is the largest payload FlagInline accepts.
	MaxInline() int
	// Err reports why the connection entered the error state, or nil.
	Err() error
	Close() error
}

// Config tunes a device. The zero value of a field means its default.
type Config struct {
	// Token is the job's shared secret. Providers that cross a process
	// boundary authenticate every connection with it (challenge-response; it
	// is never sent). Empty disables authentication.
	Token []byte
	// RNRRetry is how many times a send that finds no posted receive is
	// retried before it fails with StatusRNRRetryExceeded. Default 7, as an
	// RC queue pair's rnr_retry; -1 retries until the connection closes.
	RNRRetry int
	// RNRTimer is the wait before each receiver-not-ready retry.
	// Default 10ms (the IB timer's mid range), so the default gives a
	// receiver 70ms to post.
	RNRTimer time.Duration
	// SendQueueDepth bounds outstanding send-queue requests; a post beyond
	// it fails with ErrQueueFull. Default 4096.
	SendQueueDepth int
	// RecvQueueDepth bounds posted receives. Default 4096.
	RecvQueueDepth int
	// NUMANode is the node Alloc places memory on when PlaceNUMA is set.
	// Otherwise memory goes to the device's node, or is left to the
	// kernel's first-touch policy (the caller's node) when the device has
	// none. (A separate flag, so that node 0 can be asked for.)
	NUMANode  int
	PlaceNUMA bool
	// Spin is how long a waiter for a completion polls before it sleeps in
	// the kernel, for providers that can poll (shm). A long spin gives the
	// lowest latency when every rank has a CPU of its own, and takes CPU
	// from the others when ranks outnumber CPUs. 0: the provider's default
	// (a few microseconds).
	Spin time.Duration
	// Checksum makes providers that move bytes over a network verify a
	// CRC32C of every request and payload; a mismatch fails the
	// connection. Both ends of a connection must agree. Default off.
	Checksum bool
}

// WithDefaults returns c with its zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.RNRRetry == 0 {
		c.RNRRetry = 7
	}
	if c.RNRTimer == 0 {
		c.RNRTimer = 10 * time.Millisecond
	}
	if c.SendQueueDepth == 0 {
		c.SendQueueDepth = 4096
	}
	if c.RecvQueueDepth == 0 {
		c.RecvQueueDepth = 4096
	}
	return c
}

// AllocNode is the NUMA node Alloc must place memory on, or -1 for the
// provider's default (see NUMANode).
func (c Config) AllocNode() int {
	if c.PlaceNUMA {
		return c.NUMANode
	}
	return -1
}

// OpenFunc opens a provider's device.
type OpenFunc func(cfg Config) (Device, error)

var (
	providersMu sync.RWMutex
	providers   = map[string]OpenFunc{}
)

// RegisterProvider makes a provider available by name. Providers call it
// from init; registering a name twice replaces the earlier one.
func RegisterProvider(name string, open OpenFunc) {
	providersMu.Lock()
	defer providersMu.Unlock()
	providers[name] = open
}

// Providers lists the registered provider names, sorted.
func Providers() []string {
	providersMu.RLock()
	defer providersMu.RUnlock()
	names := make([]string, 0, len(providers))
	for n := range providers {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Open opens a device of the named provider with the default Config.
func Open(provider string) (Device, error) { return OpenConfig(provider, Config{}) }

// OpenConfig opens a device of the named provider.
func OpenConfig(provider string, cfg Config) (Device, error) {
	providersMu.RLock()
	open, ok := providers[provider]
	providersMu.RUnlock()
	if !ok {
		return nil, &OpError{Op: "open", Provider: provider, Err: ErrUnknownProvider}
	}
	return open(cfg.WithDefaults())
}
