package comm

import (
	"context"
	"sync"
	"testing"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// signals is a provider that passes everything to mem and counts the
// data writes-with-immediate the engine posts, signaled or not: a header
// alone (32 bytes; its payload went before from the caller's buffer), or
// a header with its payload copied behind it.
type signals struct {
	mu                                   sync.Mutex
	copied, copiedSig, header, headerSig int
}

func (s *signals) count(n int, f rdma.Flags) {
	sig := 0
	if f&rdma.FlagSignaled != 0 {
		sig = 1
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if n == 32 {
		s.header++
		s.headerSig += sig
	} else {
		s.copied++
		s.copiedSig += sig
	}
}

type signalsDev struct {
	rdma.Device
	s *signals
}

type signalsLn struct {
	rdma.Listener
	s *signals
}

type signalsConn struct {
	rdma.Conn
	s *signals
}

func (d signalsDev) Listen(ctx context.Context, addr string) (rdma.Listener, error) {
	ln, err := d.Device.Listen(ctx, addr)
	if err != nil {
		return nil, err
	}
	return signalsLn{ln, d.s}, nil
}

func (d signalsDev) Dial(ctx context.Context, addr string) (rdma.Conn, error) {
	c, err := d.Device.Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	return signalsConn{c, d.s}, nil
}

func (d signalsDev) DialQP(ctx context.Context, addr string, init rdma.QPInit) (rdma.Conn, error) {
	c, err := d.Device.DialQP(ctx, addr, init)
	if err != nil {
		return nil, err
	}
	return signalsConn{c, d.s}, nil
}

func (l signalsLn) Accept(ctx context.Context) (rdma.Conn, error) {
	c, err := l.Listener.Accept(ctx)
	if err != nil {
		return nil, err
	}
	return signalsConn{c, l.s}, nil
}

func (l signalsLn) AcceptQP(ctx context.Context, init rdma.QPInit) (rdma.Conn, error) {
	c, err := l.Listener.AcceptQP(ctx, init)
	if err != nil {
		return nil, err
	}
	return signalsConn{c, l.s}, nil
}

func (c signalsConn) PostWriteImm(wrid uint64, buf []byte, mr *rdma.MR, f rdma.Flags, ra uint64, rkey uint32, imm uint32) error {
	c.s.count(len(buf), f)
	return c.Conn.PostWriteImm(wrid, buf, mr, f, ra, rkey, imm)
}

var (
	signalsOnce sync.Once
	signalsSeen = &signals{}
)

// A data message whose payload is copied behind its header (up to 16 KiB;
// 64 KiB over tcp) is posted unsignaled: nothing waits for its
// completion, and on tcp a signaled write costs the peer an
// acknowledgement frame and the sender its read (2 ranks over tcp, 256 B -
// 2 KiB allreduce: 19-25 -> 12-16 us, 2026-11-24). A message sent from the
// caller's buffer stays signaled: its completion frees that buffer.
func TestCopiedDataUnsignaled(t *testing.T) {
	signalsOnce.Do(func() {
		rdma.RegisterProviderInfo(rdma.ProviderInfo{Name: "test-signals", Reach: rdma.ReachProcess}, func(cfg rdma.Config) (rdma.Device, error) {
			dev, err := rdma.OpenConfig("mem", cfg)
			if err != nil {
				return nil, err
			}
			return signalsDev{dev, signalsSeen}, nil
		})
	})
	s := signalsSeen
	s.mu.Lock()
	s.copied, s.copiedSig, s.header, s.headerSig = 0, 0, 0, 0 // an earlier run's (-count)
	s.mu.Unlock()
	cs := newLocal(t, 2, WithTransport("test-signals"))
	ctx := testCtx(t)
	for _, n := range []int{64, 512, 4096} { // 256 B to 16 KiB of float32 (engine's smallMax)
		mustAll(t, "allreduce", onAll(cs, func(c *Comm) error {
			v := make([]float32, n)
			for range 20 {
				if err := AllReduce(ctx, c, v, v, Sum); err != nil {
					return err
				}
			}
			return nil
		}))
	}
	s.mu.Lock()
	copied, copiedSig, header := s.copied, s.copiedSig, s.header
	s.mu.Unlock()
	if copied == 0 || copiedSig != 0 || header != 0 {
		t.Errorf("256 B - 16 KiB: %d copied data writes, %d of them signaled, %d header-only writes; want copied writes only, none signaled", copied, copiedSig, header)
	}
	mustAll(t, "allreduce 1 MiB", onAll(cs, func(c *Comm) error {
		v := make([]float32, 1<<18)
		return AllReduce(ctx, c, v, v, Sum)
	}))
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.header == 0 || s.headerSig != s.header {
		t.Errorf("1 MiB: %d header-only writes, %d of them signaled; want some, all signaled", s.header, s.headerSig)
	}
}
