package mem_test

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
	"github.com/gorun-hpc/gorun/transport/rdma/mem"
)

func pair(t testing.TB, cfg rdma.Config) (a, b rdma.Conn, da, db rdma.Device) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	da, db = mem.Open(cfg), mem.Open(cfg)
	ln, err := db.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a, err = da.Dial(ctx, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b, err = ln.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	t.Cleanup(func() { da.Close(); db.Close() })
	return a, b, da, db
}

func TestWriteThenSend(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, b, da, db := pair(t, rdma.Config{})
	src, _ := da.Alloc(4096, rdma.AccessLocalWrite)
	dst, _ := db.Alloc(4096, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
	rbuf, _ := db.Alloc(64, rdma.AccessLocalWrite)
	for i := range src.Bytes() {
		src.Bytes()[i] = byte(i * 7)
	}
	if err := b.PostRecv(9, rbuf.Bytes(), rbuf); err != nil {
		t.Fatal(err)
	}
	if err := a.PostWrite(1, src.Bytes(), src, 0, dst.Addr(), dst.RKey()); err != nil {
		t.Fatal(err)
	}
	if err := a.PostSend(2, []byte("hello"), nil, rdma.FlagInline|rdma.FlagSignaled); err != nil {
		t.Fatal(err)
	}
	wc, err := b.GetRecvComp(ctx)
	if err != nil || wc.Status != rdma.StatusSuccess || wc.WRID != 9 || wc.ByteLen != 5 {
		t.Fatalf("recv: %+v %v", wc, err)
	}
	if !bytes.Equal(dst.Bytes(), src.Bytes()) || string(rbuf.Bytes()[:5]) != "hello" {
		t.Fatal("data mismatch")
	}
	wc, err = a.GetSendComp(ctx)
	if err != nil || wc.WRID != 2 || wc.Status != rdma.StatusSuccess {
		t.Fatalf("send comp: %+v %v", wc, err)
	}
}

// TestNoGoroutineLeak checks that closed (and idle) connections own no
// goroutine, including ones closed with work stuck on receiver-not-ready.
func TestNoGoroutineLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	for i := 0; i < 20; i++ {
		a, b, da, db := pair(t, rdma.Config{RNRRetry: -1})
		mr, _ := da.Alloc(64, rdma.AccessLocalWrite)
		for j := 0; j < 10; j++ {
			if err := a.PostSend(uint64(j), mr.Bytes(), mr, rdma.FlagSignaled); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		for j := 0; j < 10; j++ {
			wc, err := a.GetSendComp(ctx)
			if err != nil || wc.Status != rdma.StatusFlushed {
				t.Fatalf("want flushed, got %+v %v", wc, err)
			}
		}
		if _, err := a.GetSendComp(ctx); !errors.Is(err, rdma.ErrClosed) {
			t.Fatalf("after drain: %v", err)
		}
		cancel()
		if err := a.PostSend(99, mr.Bytes(), mr, 0); !errors.Is(err, rdma.ErrClosed) {
			t.Fatalf("post after peer close: %v", err)
		}
		a.Close()
		da.Close()
		db.Close()
	}
	waitGoroutines(t, before)
}

// waitGoroutines fails if the goroutine count does not come back down to
// before within a few seconds.
func waitGoroutines(t *testing.T, before int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<16)
		t.Fatalf("%d goroutines before, %d after:\n%s", before, n, buf[:runtime.Stack(buf, true)])
	}
}

// TestPostNoAlloc: the steady-state post/complete path does not allocate.
func TestPostNoAlloc(t *testing.T) {
	ctx := context.Background()
	a, b, da, db := pair(t, rdma.Config{})
	src, _ := da.Alloc(4096, rdma.AccessLocalWrite)
	dst, _ := db.Alloc(4096, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
	step := func() {
		if err := b.PostRecv(2, dst.Bytes()[:64], dst); err != nil {
			t.Fatal(err)
		}
		if err := a.PostWrite(1, src.Bytes(), src, rdma.FlagSignaled, dst.Addr(), dst.RKey()); err != nil {
			t.Fatal(err)
		}
		if err := a.PostSend(2, src.Bytes()[:64], src, rdma.FlagSignaled); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 2; i++ {
			if wc, err := a.GetSendComp(ctx); err != nil || wc.Err() != nil {
				t.Fatal(wc, err)
			}
		}
		if wc, err := b.GetRecvComp(ctx); err != nil || wc.Err() != nil {
			t.Fatal(wc, err)
		}
	}
	step() // start the engine, grow the queues
	if n := testing.AllocsPerRun(200, step); n > 0 {
		t.Fatalf("%v allocations per post/complete round", n)
	}
}
