package rdmatest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// Options selects the provider under test.
type Options struct {
	Provider     string      // "mem", "tcp", "shm", "verbs"
	Config       rdma.Config // base config; cases override RNR fields as needed
	CrossProcess bool        // also run every case with the peer in a child process
	ListenAddr   string      // default "127.0.0.1:0" (verbs in the VM passes its rxe IP)
}

func (o Options) listenAddr() string {
	if o.ListenAddr == "" {
		return "127.0.0.1:0"
	}
	return o.ListenAddr
}

// caseTimeout bounds one case; cases move at most a few hundred MiB.
const caseTimeout = 60 * time.Second

// Run runs the whole table as subtests: under "local" with the peer in
// this process and, with CrossProcess, again under "child" with the peer in
// a child process (which needs Main in the package's TestMain).
func Run(t *testing.T, opts Options) {
	t.Run("local", func(t *testing.T) {
		runCases(t, opts, func() peer { return newLocalPeer(opts.Provider) }, spawnLocal(opts.Provider))
	})
	if !opts.CrossProcess {
		return
	}
	t.Run("child", func(t *testing.T) {
		rp, err := startChild(opts.Provider)
		if err != nil {
			t.Fatalf("start conformance child: %v", err)
		}
		defer func() {
			if err := rp.shutdown(); err != nil {
				t.Errorf("conformance child: %v", err)
			}
		}()
		runCases(t, opts, func() peer { return rp }, spawnChild(opts.Provider))
	})
}

// spawner starts a second, independent peer and returns it with a
// function that makes it die: SIGKILL for a child process, closing its
// device (every conn at once) for one in this process.
type spawner func() (p peer, kill func() error, err error)

func spawnLocal(provider string) spawner {
	return func() (peer, func() error, error) {
		p := newLocalPeer(provider)
		return p, p.Close, nil
	}
}

func spawnChild(provider string) spawner {
	return func() (peer, func() error, error) {
		rp, err := startChild(provider)
		if err != nil {
			return nil, nil, err
		}
		return rp, rp.kill, nil
	}
}

func runCases(t *testing.T, opts Options, newPeer func() peer, spawn spawner) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.long && testing.Short() {
				t.Skip("skipped in -short mode")
			}
			e := setup(t, opts, tc.cfg, newPeer())
			e.spawn = spawn
			tc.run(e)
		})
	}
}

// env is one case's world: the test side's device and conn, and the peer.
type env struct {
	t    *testing.T
	ctx  context.Context
	opts Options
	cfg  rdma.Config
	dev  rdma.Device
	a    rdma.Conn
	b    peer

	spawn spawner // a second peer, for cases that kill one
}

// setup opens both devices with the case's config and connects them.
func setup(t *testing.T, opts Options, tweak func(*rdma.Config), p peer) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), caseTimeout)
	t.Cleanup(cancel)
	cfg := opts.Config
	if tweak != nil {
		tweak(&cfg)
	}
	dev, err := rdma.OpenConfig(opts.Provider, cfg)
	if err != nil {
		t.Fatalf("open %s: %v", opts.Provider, err)
	}
	e := &env{t: t, ctx: ctx, opts: opts, cfg: cfg, dev: dev, b: p}
	t.Cleanup(func() {
		if e.a != nil {
			e.a.Close()
		}
		if err := p.Close(); err != nil && !errors.Is(err, rdma.ErrClosed) {
			t.Errorf("peer close: %v", err)
		}
		dev.Close()
	})
	addr, err := p.Listen(cfg, opts.listenAddr())
	if err != nil {
		t.Fatalf("peer listen: %v", err)
	}
	type dialed struct {
		c   rdma.Conn
		err error
	}
	ch := make(chan dialed, 1)
	go func() {
		c, err := dev.Dial(ctx, addr)
		ch <- dialed{c, err}
	}()
	acceptErr := p.Accept(10 * time.Second)
	d := <-ch
	if d.err != nil {
		t.Fatalf("dial %s: %v", addr, d.err)
	}
	e.a = d.c
	if acceptErr != nil {
		t.Fatalf("peer accept: %v", acceptErr)
	}
	return e
}

// Pair returns an in-process connected pair of the provider, each end on
// its own device, closed by tb.Cleanup. For benchmarks.
func Pair(tb testing.TB, opts Options) (a, b rdma.Conn, devA, devB rdma.Device) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var err error
	if devA, err = rdma.OpenConfig(opts.Provider, opts.Config); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { devA.Close() })
	if devB, err = rdma.OpenConfig(opts.Provider, opts.Config); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { devB.Close() })
	ln, err := devB.Listen(ctx, opts.listenAddr())
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	ch := make(chan error, 1)
	go func() {
		var err error
		b, err = ln.Accept(ctx)
		ch <- err
	}()
	a, err = devA.Dial(ctx, ln.Addr().String())
	if aerr := <-ch; err == nil {
		err = aerr
	}
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { a.Close(); b.Close() })
	return a, b, devA, devB
}

// ---- test-side helpers ----

func (e *env) fatalf(format string, args ...any) {
	e.t.Helper()
	e.t.Fatalf(format, args...)
}

func (e *env) must(err error, what string) {
	e.t.Helper()
	if err != nil {
		e.t.Fatalf("%s: %v", what, err)
	}
}

// alloc returns a region of the test side's device: mmap'd, or Go memory
// registered with Register when heap.
func (e *env) alloc(n int, access rdma.Access, heap bool) *rdma.MR {
	e.t.Helper()
	var mr *rdma.MR
	var err error
	if heap {
		mr, err = e.dev.Register(make([]byte, n), access)
	} else {
		mr, err = e.dev.Alloc(n, access)
	}
	e.must(err, fmt.Sprintf("alloc %d bytes %v", n, access))
	return mr
}

func (e *env) peerBuf(n int, access rdma.Access) rbuf {
	e.t.Helper()
	b, err := e.b.Buf(n, access, false)
	e.must(err, fmt.Sprintf("peer alloc %d bytes %v", n, access))
	return b
}

const compWait = 20 * time.Second

// sendComp waits for the next send-queue completion of the test side.
func (e *env) sendComp() rdma.WC {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, compWait)
	defer cancel()
	wc, err := e.a.GetSendComp(ctx)
	e.must(err, "GetSendComp")
	return wc
}

func (e *env) recvComp() rdma.WC {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, compWait)
	defer cancel()
	wc, err := e.a.GetRecvComp(ctx)
	e.must(err, "GetRecvComp")
	return wc
}

// expect checks a completion's wrid, status and, for a successful one,
// opcode (as in verbs, a failed completion's opcode is not defined).
func (e *env) expect(wc rdma.WC, wrid uint64, op rdma.Opcode, st rdma.Status) {
	e.t.Helper()
	if wc.WRID != wrid || wc.Status != st || (st == rdma.StatusSuccess && wc.Opcode != op) {
		// A flushed completion says only that the connection failed: name
		// why, at both ends (a reset by the peer names only the reset).
		peerErr, askErr := e.b.ConnErr()
		if askErr != nil {
			peerErr = fmt.Errorf("not known: %w", askErr)
		}
		e.fatalf("completion %+v (%v, %v): want wrid %d, %v, %v (connection: %v; the peer's end: %v)", wc, wc.Opcode, wc.Status, wrid, op, st, e.a.Err(), peerErr)
	}
}

func (e *env) expectSend(wrid uint64, op rdma.Opcode, st rdma.Status) {
	e.t.Helper()
	e.expect(e.sendComp(), wrid, op, st)
}

func (e *env) peerRecvComp() rdma.WC {
	e.t.Helper()
	wc, err := e.b.RecvComp(compWait)
	e.must(err, "peer GetRecvComp")
	return wc
}

func (e *env) peerSendComp() rdma.WC {
	e.t.Helper()
	wc, err := e.b.SendComp(compWait)
	e.must(err, "peer GetSendComp")
	return wc
}

// noSendComp checks that no send completion arrives within d.
func (e *env) noSendComp(d time.Duration) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, d)
	defer cancel()
	if wc, err := e.a.GetSendComp(ctx); err == nil {
		e.fatalf("unexpected completion %+v (%v)", wc, wc.Status)
	} else if !errors.Is(err, context.DeadlineExceeded) {
		e.fatalf("GetSendComp: want deadline exceeded, got %v", err)
	}
}

// fence makes everything the test side posted before it visible at the
// peer: a signaled send that the peer receives (post order promises the
// earlier effects are in place by then).
func (e *env) fence(wrid uint64) {
	e.t.Helper()
	e.must(e.b.PostRecv(wrid, nil), "peer post_recv (fence)")
	e.must(e.a.PostSend(wrid, nil, nil, rdma.FlagSignaled), "post_send (fence)")
	e.expect(e.peerRecvComp(), wrid, rdma.OpRecv, rdma.StatusSuccess)
	e.expectSend(wrid, rdma.OpSend, rdma.StatusSuccess)
}

// peerSum checks that the peer's range holds want.
func (e *env) peerSum(b rbuf, off int, want []byte, what string) {
	e.t.Helper()
	got, err := e.b.Sum(b, off, len(want))
	e.must(err, "peer checksum")
	if got != checksum(want) {
		e.fatalf("%s: peer data differs (crc %#x, want %#x)", what, got, checksum(want))
	}
}

// stateErr checks the test side's conn reports an error state.
func (e *env) stateErr(what string) {
	e.t.Helper()
	if e.a.Err() == nil {
		e.fatalf("%s: Conn.Err() is nil after a failed request", what)
	}
}
