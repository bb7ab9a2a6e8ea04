package tcp

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// dialPair tries to connect a device with token dial to one with token
// accept and returns both sides' errors.
//
//lint:ignore ST1008 one error per side, then the MR both sides share
func dialPair(t *testing.T, dial, accept []byte) (rdma.Conn, rdma.Conn, error, error, *rdma.MR) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	devA, _ := rdma.OpenConfig("tcp", rdma.Config{Token: dial})
	devB, _ := rdma.OpenConfig("tcp", rdma.Config{Token: accept})
	t.Cleanup(func() { devA.Close(); devB.Close() })
	target := make([]byte, 64)
	mr := mustReg(t, devB, target, rdma.AccessRemoteWrite|rdma.AccessRemoteRead)
	ln, err := devB.Listen(ctx, "127.0.0.1:0")
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
		c, err := ln.Accept(ctx)
		ch <- res{c, err}
	}()
	a, errA := devA.Dial(ctx, ln.Addr().String())
	r := <-ch
	return a, r.c, errA, r.err, mr
}

func TestToken(t *testing.T) {
	a, b, errA, errB, mr := dialPair(t, []byte("job secret"), []byte("job secret"))
	if errA != nil || errB != nil {
		t.Fatalf("right token refused: %v / %v", errA, errB)
	}
	src := []byte("authenticated")
	devA := a.(*conn).dev
	if err := a.PostWrite(1, src, mustReg(t, devA, src, 0), rdma.FlagSignaled, mr.Addr(), mr.RKey()); err != nil {
		t.Fatal(err)
	}
	if wc := sendComp(t, a); wc.Status != rdma.StatusSuccess {
		t.Fatalf("wc %+v", wc)
	}
	if string(mr.Bytes()[:len(src)]) != string(src) {
		t.Fatal("data did not move over an authenticated conn")
	}
	_ = b

	for _, tc := range []struct {
		name         string
		dial, accept []byte
	}{
		{"wrong", []byte("guess"), []byte("job secret")},
		{"missing", nil, []byte("job secret")},
		{"unexpected", []byte("job secret"), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b, errA, errB, mr := dialPair(t, tc.dial, tc.accept)
			if a != nil || b != nil {
				t.Fatal("a connection was established")
			}
			if !errors.Is(errA, rdma.ErrAuth) || !errors.Is(errB, rdma.ErrAuth) {
				t.Fatalf("dial: %v; accept: %v; want ErrAuth on both", errA, errB)
			}
			for _, v := range mr.Bytes() {
				if v != 0 {
					t.Fatal("data moved")
				}
			}
		})
	}
}

// A stray process that speaks raw bytes at the listener must not reach
// memory: it fails the handshake before a frame is read.
func TestStrayClient(t *testing.T) {
	ctx := testCtx(t)
	dev, _ := rdma.OpenConfig("tcp", rdma.Config{Token: []byte("secret")})
	defer dev.Close()
	target := make([]byte, 64)
	mr := mustReg(t, dev, target, rdma.AccessRemoteWrite)
	ln, err := dev.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ch := make(chan error, 1)
	go func() {
		_, err := ln.Accept(ctx)
		ch <- err
	}()
	nc, err := netDialer.DialContext(ctx, "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	var h header
	var b [hdrLen]byte
	h = header{op: opWrite, rkey: mr.RKey(), addr: mr.Addr(), length: 8}
	h.encode(&b)
	nc.Write(append(b[:], "AAAAAAAA"...))
	nc.Close()
	if err := <-ch; err == nil {
		t.Fatal("stray client accepted")
	}
	for _, v := range target {
		if v != 0 {
			t.Fatal("stray bytes reached memory")
		}
	}
}

// A client that connects and says nothing holds neither Accept nor the
// next client, and Close does not wait for its handshake to time out.
func TestSilentClientDoesNotBlockAccept(t *testing.T) {
	ctx := testCtx(t)
	dev, _ := rdma.Open("tcp")
	defer dev.Close()
	ln, err := dev.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	silent, err := netDialer.DialContext(ctx, "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	time.Sleep(10 * time.Millisecond)
	dialed := make(chan error, 1)
	go func() {
		c, err := dev.Dial(ctx, ln.Addr().String())
		if err == nil {
			defer c.Close()
		}
		dialed <- err
	}()
	actx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	c, err := ln.Accept(actx)
	if err != nil {
		t.Fatalf("accept behind a silent client: %v", err)
	}
	c.Close()
	if err := <-dialed; err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	ln.Close()
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("listener close waited %v for a handshake", d)
	}
	if _, err := ln.Accept(ctx); !errors.Is(err, rdma.ErrClosed) {
		t.Fatalf("accept after close: %v", err)
	}
}
