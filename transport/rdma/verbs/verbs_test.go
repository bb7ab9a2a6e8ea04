//go:build linux && cgo && rdma

package verbs

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
	"github.com/gorun-hpc/gorun/transport/rdma/rdmatest"
)

func TestMain(m *testing.M) { os.Exit(rdmatest.Main(m)) }

// TestConformance runs the provider conformance suite over rxe0, with the
// peer in this process and in a child process.
func TestConformance(t *testing.T) {
	rdmatest.Run(t, rdmatest.Options{Provider: "verbs", ListenAddr: vmIP(t) + ":0", CrossProcess: true})
}

// vmIP is the address rxe0 is bound to inside the rxe VM (scripts/rxe-vm);
// the tests that need a device skip without it.
func vmIP(t testing.TB) string {
	ip := os.Getenv("RXE_VM_IP")
	if ip == "" {
		t.Skip("RXE_VM_IP not set: run inside the rxe VM (scripts/rxe-vm/test.sh)")
	}
	return ip
}

func openDev(t testing.TB, cfg rdma.Config) rdma.Device {
	t.Helper()
	vmIP(t)
	d, err := rdma.OpenConfig("verbs", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// pair returns two connected ends (client, server) on one device.
func pair(t testing.TB, d rdma.Device) (rdma.Conn, rdma.Conn) {
	t.Helper()
	return pairQP(t, d, d, rdma.QPInit{}, rdma.QPInit{})
}

// pairQP connects a client on dc (with cli's CQs) to a server on ds.
func pairQP(t testing.TB, dc, ds rdma.Device, cli, srv rdma.QPInit) (rdma.Conn, rdma.Conn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ln, err := ds.Listen(ctx, vmIP(t)+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type res struct {
		c   rdma.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := ln.AcceptQP(ctx, srv)
		ch <- res{c, err}
	}()
	c, err := dc.DialQP(ctx, ln.Addr().String(), cli)
	if err != nil {
		t.Fatal("dial:", err)
	}
	r := <-ch
	if r.err != nil {
		t.Fatal("accept:", r.err)
	}
	t.Cleanup(func() { c.Close(); r.c.Close() })
	return c, r.c
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustWC(t testing.TB, wc rdma.WC, err error, wrid uint64, op rdma.Opcode) rdma.WC {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	if wc.WRID != wrid || wc.Status != rdma.StatusSuccess || wc.Opcode != op {
		t.Fatalf("completion %+v, want wrid %d %s success", wc, wrid, op)
	}
	return wc
}

func TestSendRecv(t *testing.T) {
	d := openDev(t, rdma.Config{})
	cli, srv := pair(t, d)
	ctx := ctxT(t)
	rbuf, err := d.Alloc(4096, rdma.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	msg := []byte("hello over rxe0")
	sbuf := make([]byte, len(msg)) // Go memory, pinned by Register
	copy(sbuf, msg)
	smr, err := cli.RegMsgs(sbuf)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.PostRecv(7, rbuf.Bytes(), rbuf); err != nil {
		t.Fatal(err)
	}
	if err := cli.PostSend(9, sbuf, smr, rdma.FlagSignaled); err != nil {
		t.Fatal(err)
	}
	wc, err := cli.GetSendComp(ctx)
	mustWC(t, wc, err, 9, rdma.OpSend)
	wc, err = srv.GetRecvComp(ctx)
	wc = mustWC(t, wc, err, 7, rdma.OpRecv)
	if wc.ByteLen != len(msg) || !bytes.Equal(rbuf.Bytes()[:len(msg)], msg) {
		t.Fatalf("received %d bytes %q", wc.ByteLen, rbuf.Bytes()[:wc.ByteLen])
	}
	if err := smr.Deregister(); err != nil {
		t.Fatal(err)
	}
	if err := cli.PostSend(10, sbuf, smr, 0); !errors.Is(err, rdma.ErrNotRegistered) {
		t.Fatalf("post with a deregistered MR: %v", err)
	}
}

// TestSetupTimings logs what connection setup and teardown cost (under TCG
// they dominate the conformance suite's time).
func TestSetupTimings(t *testing.T) {
	vmIP(t)
	t0 := time.Now()
	Devices()
	tDevs := time.Since(t0)
	t0 = time.Now()
	deviceList()
	tList := time.Since(t0)
	t.Logf("Devices %v, rdma_get_devices %v", tDevs, tList)
	t0 = time.Now()
	openDev(t, rdma.Config{}).Close()
	tFirst := time.Since(t0)
	t0 = time.Now()
	d := openDev(t, rdma.Config{})
	t1 := time.Now()
	cli, srv := pair(t, d)
	t2 := time.Now()
	cli.Close()
	t3 := time.Now()
	srv.Close()
	t4 := time.Now()
	d.Close()
	t.Logf("first open %v, open %v, listen+dial+accept %v, close %v, peer close %v, device close %v",
		tFirst, t1.Sub(t0), t2.Sub(t1), t3.Sub(t2), t4.Sub(t3), time.Since(t4))
}

// TestRecvTooSmall: the receiver's completion and Conn.Err say why.
func TestRecvTooSmall(t *testing.T) {
	d := openDev(t, rdma.Config{})
	cli, srv := pair(t, d)
	ctx := ctxT(t)
	rb, _ := d.Alloc(64, rdma.AccessLocalWrite)
	sb, _ := d.Alloc(64, rdma.AccessLocalWrite)
	if err := srv.PostRecv(1, rb.Bytes()[:16], rb); err != nil {
		t.Fatal(err)
	}
	if err := cli.PostSend(2, sb.Bytes(), sb, rdma.FlagSignaled); err != nil {
		t.Fatal(err)
	}
	wc, err := srv.GetRecvComp(ctx)
	t.Logf("receiver: %+v %v; Err: %v", wc, err, srv.Err())
	swc, err := cli.GetSendComp(ctx)
	t.Logf("sender: %+v %v; Err: %v", swc, err, cli.Err())
	if wc.Status != rdma.StatusLocalLengthError {
		t.Errorf("receiver status %v, want %v", wc.Status, rdma.StatusLocalLengthError)
	}
	if swc.Status == rdma.StatusSuccess {
		t.Error("sender's send succeeded")
	}
}

// TestTokenAuth: with Config.Token, only peers with the same token connect.
func TestTokenAuth(t *testing.T) {
	ip := vmIP(t)
	ctx := ctxT(t)
	srv := openDev(t, rdma.Config{Token: []byte("job-42")})
	ln, err := srv.Listen(ctx, ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan rdma.Conn, 1)
	go func() {
		c, err := ln.Accept(ctx) // skips the requests that fail authentication
		if err != nil {
			t.Error("accept:", err)
		}
		accepted <- c
	}()
	for _, tc := range []struct {
		name  string
		token string
	}{{"wrong token", "job-43"}, {"no token", ""}} {
		d := openDev(t, rdma.Config{Token: []byte(tc.token)})
		if c, err := d.Dial(ctx, ln.Addr().String()); !errors.Is(err, rdma.ErrAuth) {
			t.Errorf("%s: dial = %v, %v; want ErrAuth", tc.name, c, err)
		}
	}
	// The wrong proof was refused by the server (counted before its
	// reject went out); the client without a token gave up on a
	// challenge, which is no refusal.
	if got := srv.(rdma.CounterSource).Counters().AuthFailures; got != 1 {
		t.Errorf("server counted %d refused handshakes, want 1", got)
	}
	good := openDev(t, rdma.Config{Token: []byte("job-42")})
	c, err := good.Dial(ctx, ln.Addr().String())
	if err != nil {
		t.Fatal("same token:", err)
	}
	defer c.Close()
	s := <-accepted
	if s == nil {
		t.Fatal("no accepted conn")
	}
	defer s.Close()
	rb, _ := srv.Alloc(64, rdma.AccessLocalWrite)
	if err := s.PostRecv(1, rb.Bytes(), rb); err != nil {
		t.Fatal(err)
	}
	if err := c.PostSend(2, []byte("authenticated"), nil, rdma.FlagInline|rdma.FlagSignaled); err != nil {
		t.Fatal(err)
	}
	wc, err := s.GetRecvComp(ctx)
	mustWC(t, wc, err, 1, rdma.OpRecv)

	// A client with a token meets a server without one.
	plain := openDev(t, rdma.Config{})
	pln, err := plain.Listen(ctx, ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer pln.Close()
	go func() {
		if c, err := pln.Accept(ctx); err == nil {
			c.Close()
		}
	}()
	if c, err := good.Dial(ctx, pln.Addr().String()); !errors.Is(err, rdma.ErrAuth) {
		t.Errorf("token client to plain server: dial = %v, %v; want ErrAuth", c, err)
	}
}

// TestPostNoAlloc: the post path does not allocate.
func TestPostNoAlloc(t *testing.T) {
	d := openDev(t, rdma.Config{})
	cli, _ := pair(t, d)
	src, _ := d.Alloc(4096, rdma.AccessLocalWrite)
	dst, _ := d.Alloc(4096, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
	n := testing.AllocsPerRun(200, func() {
		if err := cli.PostWrite(1, src.Bytes(), src, 0, dst.Addr(), dst.RKey()); err != nil {
			t.Fatal(err)
		}
	})
	if n != 0 {
		t.Errorf("PostWrite allocates %v times per call", n)
	}
	if err := cli.PostWrite(2, src.Bytes(), src, rdma.FlagSignaled, dst.Addr(), dst.RKey()); err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	wc, err := cli.GetSendComp(ctx)
	mustWC(t, wc, err, 2, rdma.OpWrite)
	// A signaled write and its completion, waited for (and slept on under
	// an emulated CPU), allocate nothing either.
	n = testing.AllocsPerRun(50, func() {
		if err := cli.PostWrite(3, src.Bytes(), src, rdma.FlagSignaled, dst.Addr(), dst.RKey()); err != nil {
			t.Fatal(err)
		}
		if wc, err := cli.GetSendComp(ctx); err != nil || wc.WRID != 3 {
			t.Fatal(wc, err)
		}
	})
	if n != 0 {
		t.Errorf("PostWrite+GetSendComp allocates %v times", n)
	}
}

// TestWaitersEnd: a waiter ends with its context, and Close hands a
// blocked waiter its flushed receive, then ErrClosed.
func TestWaitersEnd(t *testing.T) {
	d := openDev(t, rdma.Config{})
	cli, _ := pair(t, d)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := cli.GetSendComp(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("GetSendComp with nothing outstanding: %v, want DeadlineExceeded", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("ctx ended the wait after %v", el)
	}
	rb, _ := d.Alloc(64, rdma.AccessLocalWrite)
	if err := cli.PostRecv(5, rb.Bytes(), rb); err != nil {
		t.Fatal(err)
	}
	type res struct {
		wc  rdma.WC
		err error
	}
	got := make(chan res, 1)
	go func() {
		wc, err := cli.GetRecvComp(ctxT(t))
		got <- res{wc, err}
	}()
	time.Sleep(200 * time.Millisecond) // let it sleep in the netpoller
	cli.Close()
	r := <-got
	if r.err != nil || r.wc.WRID != 5 || r.wc.Status != rdma.StatusFlushed {
		t.Fatalf("blocked waiter after Close: %+v %v, want wrid 5 flushed", r.wc, r.err)
	}
	if _, err := cli.GetRecvComp(ctxT(t)); !errors.Is(err, rdma.ErrClosed) {
		t.Fatalf("GetRecvComp after the flush: %v, want ErrClosed", err)
	}
	if err := rb.Deregister(); err != nil {
		t.Fatalf("deregister after Close: %v", err)
	}
}

// TestLoopbackAddr: every provider's Listen accepts "127.0.0.1:0" and Dial
// its Addr (DESIGN.md). rdma_cm cannot resolve loopback on RoCE, so the
// provider stands the device's own address in for it.
func TestLoopbackAddr(t *testing.T) {
	d := openDev(t, rdma.Config{})
	ctx := ctxT(t)
	ln, err := d.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen 127.0.0.1:0: %v", err)
	}
	defer ln.Close()
	if a := ln.Addr().(*net.TCPAddr); a.IP.IsLoopback() || a.Port == 0 {
		t.Errorf("listener address %v", a)
	}
	go func() {
		if c, err := ln.Accept(ctx); err == nil {
			defer c.Close()
			<-ctx.Done()
		}
	}()
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := d.Dial(dctx, ln.Addr().String())
	if err != nil {
		t.Fatalf("dial %s: %v", ln.Addr(), err)
	}
	c.Close()
}
