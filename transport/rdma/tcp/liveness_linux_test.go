package tcp

import (
	"context"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// Both ends of a connection carry the liveness settings: keepalive with
// its idle time, interval and count, and no TCP_USER_TIMEOUT (see
// liveness_linux.go).
func TestLivenessSocketOptions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dev, err := rdma.Open("tcp")
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	ln, err := dev.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan rdma.Conn, 1)
	go func() { c, _ := ln.Accept(ctx); acc <- c }()
	a, err := dev.Dial(ctx, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b := <-acc
	if b == nil {
		t.Fatal("accept failed")
	}
	defer b.Close()
	for name, c := range map[string]rdma.Conn{"dialer": a, "acceptor": b} {
		nc, ok := c.(*conn).nc.(*net.TCPConn)
		if !ok {
			t.Fatalf("%s: not a TCP socket", name)
		}
		rc, _ := nc.SyscallConn()
		want := map[string][3]int{
			"SO_KEEPALIVE":     {unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1},
			"TCP_KEEPIDLE":     {unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, int(keepAliveIdle / time.Second)},
			"TCP_KEEPINTVL":    {unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, int(keepAliveInterval / time.Second)},
			"TCP_KEEPCNT":      {unix.IPPROTO_TCP, unix.TCP_KEEPCNT, keepAliveCount},
			"TCP_USER_TIMEOUT": {unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, 0},
		}
		for opt, w := range want {
			var got int
			var gerr error
			rc.Control(func(fd uintptr) { got, gerr = unix.GetsockoptInt(int(fd), w[0], w[1]) })
			if gerr != nil || got != w[2] {
				t.Errorf("%s: %s = %d (%v), want %d", name, opt, got, gerr, w[2])
			}
		}
	}
}

// TestZeroWindowNotCut: a socket with the liveness settings, whose peer
// is alive but reads nothing for 2.5 s (its receive window closes), keeps
// its connection: writes block until the deadline and then fail with the
// deadline, not ETIMEDOUT. (With TCP_USER_TIMEOUT at 1.5 s the kernel
// aborted the connection once its zero-window probes had gone on for
// 1.5 s: a rank computing or descheduled while a large message waited for
// it lost the link.)
func TestZeroWindowNotCut(t *testing.T) {
	if testing.Short() {
		t.Skip("waits 2.5 s")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peer := make(chan net.Conn, 1)
	go func() { c, _ := ln.Accept(); peer <- c }()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p := <-peer
	if p == nil {
		t.Fatal("accept failed")
	}
	defer p.Close() // never read
	setLiveness(c.(*net.TCPConn))
	buf := make([]byte, 1<<20)
	c.SetWriteDeadline(time.Now().Add(2500 * time.Millisecond))
	for {
		if _, err := c.Write(buf); err != nil {
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("write to a live peer that does not read: %v, want the deadline", err)
			}
			return
		}
	}
}
