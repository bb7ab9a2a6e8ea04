package reliability

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
	_ "github.com/gorun-hpc/gorun/transport/rdma/shm"
	_ "github.com/gorun-hpc/gorun/transport/rdma/tcp"
)

var token = []byte("reliability job secret")

func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func openDev(t testing.TB, provider string, tok []byte) rdma.Device {
	t.Helper()
	// GORUN_CHECKSUM=1 (t.Setenv) turns on tcp's CRC32C, as comm does.
	d, err := rdma.OpenConfig(provider, rdma.Config{Token: tok, Checksum: os.Getenv("GORUN_CHECKSUM") == "1"})
	if err != nil {
		t.Skipf("%s: %v", provider, err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// target is a listening device with a remotely writable region of known
// content (0x5A) that no unauthenticated peer may change.
type target struct {
	dev rdma.Device
	ln  rdma.Listener
	mr  *rdma.MR
}

func newTarget(t testing.TB, provider string) *target {
	dev := openDev(t, provider, token)
	mr, err := dev.Alloc(4096, rdma.AccessLocalWrite|rdma.AccessRemoteWrite|rdma.AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	for i := range mr.Bytes() {
		mr.Bytes()[i] = 0x5A
	}
	ln, err := dev.Listen(ctxFor(t, 10*time.Second), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return &target{dev: dev, ln: ln, mr: mr}
}

func (tg *target) intact(t testing.TB) {
	t.Helper()
	for i, v := range tg.mr.Bytes() {
		if v != 0x5A {
			t.Fatalf("registered memory changed at %d: %#x", i, v)
		}
	}
}

// acceptOne runs one Accept and returns its result on a channel.
func (tg *target) acceptOne(ctx context.Context) <-chan error {
	ch := make(chan error, 1)
	go func() {
		c, err := tg.ln.Accept(ctx)
		if c != nil {
			c.Close()
		}
		ch <- err
	}()
	return ch
}

// A raw TCP client that speaks garbage, or a valid-looking hello without
// the token, never gets a connection and never writes memory.
func TestTCPGarbageClientRefused(t *testing.T) {
	tg := newTarget(t, "tcp")
	hello := append([]byte("gorunTCP"), 0, 1, 0, 0)
	hello = append(hello, make([]byte, 32)...)
	frame := bytes.Repeat([]byte{0xff, 0, 0, 0, 1, 0, 0, 0}, 512) // frame-like noise
	junk := make([]byte, 4096)
	rand.Read(junk)
	for name, payload := range map[string][]byte{
		"random":         junk,
		"hello-no-token": append(append([]byte(nil), hello...), frame...),
		"http":           []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
		"silent":         nil,
	} {
		t.Run(name, func(t *testing.T) {
			if name == "silent" && testing.Short() {
				t.Skip("waits for the 10 s handshake deadline")
			}
			ctx := ctxFor(t, 15*time.Second)
			acc := tg.acceptOne(ctx)
			nc, err := net.Dial("tcp", tg.ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			nc.Write(payload)
			if name != "silent" {
				// Then go quiet. (A silent client must not hold Accept
				// forever either: the handshake has its own deadline,
				// 10 s in tcp.)
				nc.(*net.TCPConn).CloseWrite()
			}
			select {
			case err := <-acc:
				if err == nil {
					t.Fatal("Accept returned a connection to a client without the token")
				}
				t.Logf("refused: %v", err)
			case <-ctx.Done():
				t.Fatal("Accept still waiting on a garbage client")
			}
			tg.intact(t)
		})
	}
}

// recorder is a TCP tap that forwards one connection to target and keeps
// the client's bytes.
type recorder struct {
	ln  net.Listener
	mu  sync.Mutex
	buf bytes.Buffer
	wg  sync.WaitGroup
}

func record(t testing.TB, targetAddr string) *recorder {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &recorder{ln: ln}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		in, err := ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", targetAddr)
		if err != nil {
			in.Close()
			return
		}
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			io.Copy(in, out)
			in.Close()
		}()
		io.Copy(io.MultiWriter(out, (*lockedBuf)(r)), in)
		out.Close()
	}()
	t.Cleanup(func() { ln.Close(); r.wg.Wait() })
	return r
}

type lockedBuf recorder

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (r *recorder) bytes() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]byte(nil), r.buf.Bytes()...)
}

// Replaying a legitimate client's bytes (its authenticated hello and a
// write) to a new connection is refused: the proof covers a fresh nonce of
// the acceptor.
func TestTCPReplayRefused(t *testing.T) {
	tg := newTarget(t, "tcp")
	ctx := ctxFor(t, 20*time.Second)
	rec := record(t, tg.ln.Addr().String())
	acc := make(chan rdma.Conn, 1)
	go func() {
		c, _ := tg.ln.Accept(ctx)
		acc <- c
	}()
	client := openDev(t, "tcp", token)
	c, err := client.Dial(ctx, rec.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	srv := <-acc
	if srv == nil {
		t.Fatal("legitimate client refused")
	}
	src := bytes.Repeat([]byte{0x77}, 64)
	smr, _ := client.Register(src, rdma.AccessLocalWrite)
	if err := c.PostWrite(1, src, smr, rdma.FlagSignaled, tg.mr.Addr(), tg.mr.RKey()); err != nil {
		t.Fatal(err)
	}
	if wc, err := c.GetSendComp(ctx); err != nil || wc.Status != rdma.StatusSuccess {
		t.Fatalf("legitimate write: %+v %v", wc, err)
	}
	c.Close()
	srv.Close()
	time.Sleep(50 * time.Millisecond)
	wire := rec.bytes()
	for i := range 64 {
		tg.mr.Bytes()[i] = 0x5A
	}
	if len(wire) < 64 {
		t.Fatalf("recorded only %d bytes", len(wire))
	}
	accErr := tg.acceptOne(ctx)
	nc, err := net.Dial("tcp", tg.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.Write(wire)
	if err := <-accErr; err == nil || !errors.Is(err, rdma.ErrAuth) {
		t.Fatalf("replayed handshake: Accept error %v, want ErrAuth", err)
	}
	time.Sleep(50 * time.Millisecond)
	tg.intact(t)
}

// A peer with the wrong token or none is refused by shm as by tcp.
func TestSHMWrongTokenRefused(t *testing.T) {
	for name, tok := range map[string][]byte{"wrong": []byte("guess"), "missing": nil} {
		t.Run(name, func(t *testing.T) {
			tg := newTarget(t, "shm")
			ctx := ctxFor(t, 15*time.Second)
			acc := tg.acceptOne(ctx)
			d := openDev(t, "shm", tok)
			c, err := d.Dial(ctx, tg.ln.Addr().String())
			if err == nil {
				c.Close()
				t.Fatal("dial with a bad token succeeded")
			}
			if aerr := <-acc; aerr == nil {
				t.Fatal("accept with a bad token succeeded")
			} else if !errors.Is(aerr, rdma.ErrAuth) && !errors.Is(err, rdma.ErrAuth) {
				t.Errorf("dial: %v; accept: %v; want ErrAuth on one side", err, aerr)
			} else {
				t.Logf("dial: %v; accept: %v", err, aerr)
			}
			tg.intact(t)
		})
	}
}

// shm's sockets are abstract (no file in TMPDIR); its memfds (segments
// and arena) are 0600.
func TestSHMPrivate(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("TMPDIR", dir)
	t.Setenv("XDG_RUNTIME_DIR", "")
	tg := newTarget(t, "shm")
	ctx := ctxFor(t, 15*time.Second)
	got := make(chan rdma.Conn, 1)
	go func() {
		c, _ := tg.ln.Accept(ctx)
		got <- c
	}()
	d := openDev(t, "shm", token)
	c, err := d.Dial(ctx, tg.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if s := <-got; s != nil {
		defer s.Close()
	}
	// The socket is abstract: no file, so no permissions to get wrong and
	// nothing left behind; the uid check (SO_PEERCRED) keeps other users
	// out (transport/rdma/shm TestOtherUIDRefused).
	sock := tg.ln.Addr().String()
	if !strings.HasPrefix(sock, "@") {
		t.Errorf("shm listens on %q, want an abstract socket", sock)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("listening and connecting left %v in TMPDIR", ents)
	}
	ents, _ := os.ReadDir("/proc/self/fd")
	memfds := 0
	for _, e := range ents {
		p := filepath.Join("/proc/self/fd", e.Name())
		if l, _ := os.Readlink(p); len(l) > 7 && l[:7] == "/memfd:" {
			var st syscall.Stat_t
			if err := syscall.Stat(p, &st); err != nil {
				continue
			}
			memfds++
			if st.Mode&0o077 != 0 {
				t.Errorf("memfd %s has mode %o", l, st.Mode&0o777)
			}
		}
	}
	if memfds == 0 {
		t.Error("no memfd found: the check saw nothing")
	}
	t.Logf("socket %s, %d memfds checked", sock, memfds)
}
