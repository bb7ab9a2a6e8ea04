//go:build linux

package shm

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

func TestModes(t *testing.T) {
	tmp, xdg := t.TempDir(), t.TempDir()
	t.Setenv("TMPDIR", tmp)
	t.Setenv("XDG_RUNTIME_DIR", xdg)
	dev, ln := listenOne(t, rdma.Config{})
	// The default socket is abstract: no file anywhere.
	if a := ln.Addr().String(); !strings.HasPrefix(a, "@gorun-shm-") {
		t.Fatalf("default listener at %q, want an abstract @gorun-shm-… name", a)
	}
	for _, d := range []string{tmp, xdg} {
		if ents, _ := os.ReadDir(d); len(ents) != 0 {
			t.Fatalf("listening left %v in %s", ents, d)
		}
	}
	// An explicit path gets a socket file, 0600, removed by Close.
	path := filepath.Join(t.TempDir(), "explicit.sock")
	eln, err := dev.Listen(testCtx(t), path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket %s mode %v, want socket 0600", path, fi.Mode())
	}
	eln.Close()
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("socket left behind after Close: %v", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(dev.(*Device).arena.fd, &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode&0o777 != 0o600 || int(st.Uid) != os.Getuid() {
		t.Fatalf("arena memfd mode %o uid %d, want 0600 uid %d", st.Mode&0o777, st.Uid, os.Getuid())
	}
	// Every memfd this process holds (arenas; segments are closed once
	// mapped, so look at the mappings too) is 0600.
	pair(t, rdma.Config{})
	checked := 0
	ents, _ := os.ReadDir("/proc/self/fd")
	for _, e := range ents {
		p := filepath.Join("/proc/self/fd", e.Name())
		if l, _ := os.Readlink(p); strings.HasPrefix(l, "/memfd:gorun-shm") {
			var st unix.Stat_t
			if unix.Stat(p, &st) == nil {
				checked++
				if st.Mode&0o777 != 0o600 {
					t.Errorf("%s: mode %o", l, st.Mode&0o777)
				}
			}
		}
	}
	if checked < 3 { // this device's arena and the pair's two
		t.Errorf("only %d gorun-shm memfds found", checked)
	}
	// A segment's fd is closed once both sides have mapped it: check one
	// as created.
	seg, fd, err := newSegment(16)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&0o777 != 0o600 {
		t.Errorf("segment memfd mode %o (%v)", st.Mode&0o777, err)
	}
	unix.Close(fd)
	seg.unmap()
}

func TestAuth(t *testing.T) {
	for _, tc := range []struct {
		name          string
		server, dialr string
		ok            bool
	}{
		{"same", "s3cret", "s3cret", true},
		{"wrong", "s3cret", "guess", false},
		{"missing", "s3cret", "", false},
		{"unexpected", "", "s3cret", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ln := listenOne(t, rdma.Config{Token: []byte(tc.server)})
			dd, err := rdma.OpenConfig("shm", rdma.Config{Token: []byte(tc.dialr)})
			if err != nil {
				t.Fatal(err)
			}
			defer dd.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			c, derr := dd.Dial(ctx, ln.Addr().String())
			if derr == nil {
				c.Close()
			}
			ac, aerr := ln.Accept(ctx) // a failed handshake is reported too

			if aerr == nil {
				ac.Close()
			}
			if tc.ok && (derr != nil || aerr != nil) {
				t.Fatalf("dial %v, accept %v", derr, aerr)
			}
			if !tc.ok && (!errors.Is(derr, rdma.ErrAuth) || !errors.Is(aerr, rdma.ErrAuth)) {
				t.Fatalf("want both sides to fail with ErrAuth: dial %v, accept %v", derr, aerr)
			}
		})
	}
}

func TestContext(t *testing.T) {
	dev, ln := listenOne(t, rdma.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := ln.Accept(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Accept = %v", err)
	}
	// A dial to a socket whose owner never answers ends with its context.
	mute, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(t.TempDir(), "mute.sock"), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer mute.Close()
	ctx2, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	if _, err := dev.Dial(ctx2, mute.Addr().String()); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Dial = %v", err)
	}
	a, _, _, _ := pair(t, rdma.Config{})
	ctx3, cancel3 := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel3()
	if _, err := a.GetRecvComp(ctx3); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("GetRecvComp = %v", err)
	}
}

func countFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

func countMaps(t *testing.T) (all, ours int) {
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if l == "" {
			continue
		}
		all++
		if strings.Contains(l, "gorun-shm") {
			ours++
		}
	}
	return all, ours
}

func TestNoLeak(t *testing.T) {
	round := func() {
		ctx := testCtx(t)
		da, _ := rdma.Open("shm")
		db, _ := rdma.Open("shm")
		ln, err := db.Listen(ctx, "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		acc := make(chan rdma.Conn, 1)
		go func() { c, _ := ln.Accept(ctx); acc <- c }()
		a, err := da.Dial(ctx, ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		b := <-acc
		r, _ := db.Alloc(1<<20, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
		g, _ := db.Register(make([]byte, 4096), rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
		l, _ := da.Alloc(4096, rdma.AccessLocalWrite)
		a.PostWrite(1, l.Bytes(), l, rdma.FlagSignaled, r.Addr(), r.RKey())
		a.PostWrite(2, l.Bytes(), l, rdma.FlagSignaled, g.Addr(), g.RKey())
		b.PostRecv(3, r.Bytes()[:8], r)
		a.PostSend(4, l.Bytes()[:8], l, rdma.FlagSignaled)
		for i := 0; i < 3; i++ {
			if _, err := a.GetSendComp(ctx); err != nil {
				t.Fatal(err)
			}
		}
		b.GetRecvComp(ctx)
		if _, o := countMaps(t); o < 4 { // 2 arenas, 2 peer arenas, 4 segments, 2 regions
			t.Errorf("only %d gorun-shm mappings while connected", o)
		}
		ln.Close()
		a.Close()
		b.Close()
		if err := da.Close(); err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	round() // warm up the runtime's own fds (netpoller) and mappings
	runtime.GC()
	fds, _ := countFDs(t), 0
	maps, _ := countMaps(t)
	goroutines := runtime.NumGoroutine()
	for i := 0; i < 3; i++ {
		round()
	}
	if got := countFDs(t); got != fds {
		t.Errorf("open fds: %d before, %d after", fds, got)
	}
	// Every mapping this package makes is of a memfd named gorun-shm-*;
	// other new mappings are the runtime's (heap, new threads' stacks).
	all, ours := countMaps(t)
	if ours != 0 {
		t.Errorf("%d gorun-shm mappings left", ours)
	}
	t.Logf("mappings: %d before, %d after (none of them gorun-shm)", maps, all)
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > goroutines && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if g := runtime.NumGoroutine(); g > goroutines {
		t.Errorf("goroutines: %d before, %d after", goroutines, g)
	}
}

// TestHandshakeFailsAfterSetup: a peer that gets as far as the setup
// message and then sends garbage (no memfds) fails the handshake cleanly:
// the half-made connection is undone, Accept reports the error, nothing
// panics.
func TestHandshakeFailsAfterSetup(t *testing.T) {
	_, ln := listenOne(t, rdma.Config{})
	uc, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: ln.Addr().String(), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	var hello [helloLen]byte
	binary.LittleEndian.PutUint64(hello[0:], segMagic)
	binary.LittleEndian.PutUint32(hello[8:], segVersion)
	if _, err := uc.Write(hello[:]); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(uc, hello[:]); err != nil {
		t.Fatal(err)
	}
	var setup [setupLen]byte // no SCM_RIGHTS
	if _, err := uc.Write(setup[:]); err != nil {
		t.Fatal(err)
	}
	if c, err := ln.Accept(testCtx(t)); err == nil || !errors.Is(err, errProtocol) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("Accept after a bad setup: %v", err)
	}
}
