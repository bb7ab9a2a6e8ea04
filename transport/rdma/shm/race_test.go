//go:build linux

package shm

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// TestDeregisterRace: writes stream into a region while its owner
// deregisters it. Once Deregister has returned, no byte of the region may
// change, on either path (arena memcpy, cross-memory attach), and the
// stream must end with a remote access error.
func TestDeregisterRace(t *testing.T) {
	for _, mem := range []string{"alloc", "registered"} {
		t.Run(mem, func(t *testing.T) {
			a, _, da, db := pair(t, rdma.Config{})
			const n = 256 << 10
			acc := rdma.AccessLocalWrite | rdma.AccessRemoteWrite
			var target *rdma.MR
			var err error
			goMem := make([]byte, n)
			if mem == "alloc" {
				target, err = db.Alloc(n, acc)
			} else {
				target, err = db.Register(goMem, acc)
			}
			if err != nil {
				t.Fatal(err)
			}
			src, _ := da.Alloc(n, rdma.AccessLocalWrite)
			addr, key := target.Addr(), target.RKey()
			stop := make(chan struct{})
			done := make(chan rdma.Status, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				for i := 0; ; i++ {
					src.Bytes()[0] = byte(i)
					if err := a.PostWrite(uint64(i), src.Bytes(), src, rdma.FlagSignaled, addr, key); err != nil {
						t.Error(err)
						done <- rdma.StatusFatal
						return
					}
					wc, err := a.GetSendComp(ctx)
					if err != nil || wc.Status != rdma.StatusSuccess {
						done <- wc.Status
						return
					}
					select {
					case <-stop:
						done <- wc.Status
						return
					default:
					}
				}
			}()
			time.Sleep(5 * time.Millisecond)
			if err := target.Deregister(); err != nil {
				t.Fatal(err)
			}
			if mem == "registered" {
				snap := append([]byte(nil), goMem...)
				time.Sleep(20 * time.Millisecond)
				if !bytes.Equal(snap, goMem) {
					t.Fatal("registered memory changed after Deregister returned")
				}
			}
			if st := <-done; st != rdma.StatusRemoteAccessError {
				t.Fatalf("the write stream ended with %v, want a remote access error", st)
			}
			close(stop)
		})
	}
}

// TestHotPathAllocs: posting and completing on the fast path does not
// allocate.
func TestHotPathAllocs(t *testing.T) {
	a, b, da, db := pair(t, rdma.Config{})
	dst, _ := db.Alloc(4096, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
	src, _ := da.Alloc(4096, rdma.AccessLocalWrite)
	rb, _ := db.Alloc(4096, rdma.AccessLocalWrite)
	ctx := context.Background()
	allocs := testing.AllocsPerRun(200, func() {
		a.PostWrite(1, src.Bytes(), src, rdma.FlagSignaled, dst.Addr(), dst.RKey())
		a.GetSendComp(ctx)
		b.PostRecv(2, rb.Bytes()[:64], rb)
		a.PostSend(3, src.Bytes()[:64], src, rdma.FlagSignaled)
		a.GetSendComp(ctx)
		b.GetRecvComp(ctx)
	})
	if allocs > 0 {
		t.Fatalf("%.1f allocations per write+send round", allocs)
	}
}

// TestDirectSendVersusClose: sends copy straight into Alloc'd receives
// while the receiver closes. The receiver's regions must be free (not
// busy) once Close returns, and the sender must end in an error.
func TestDirectSendVersusClose(t *testing.T) {
	a, b, da, db := pair(t, rdma.Config{RNRRetry: -1})
	const n = 1 << 20
	src, _ := da.Alloc(n, rdma.AccessLocalWrite)
	dst, _ := db.Alloc(4*n, rdma.AccessLocalWrite)
	for i := 0; i < 4; i++ {
		b.PostRecv(uint64(i), dst.Bytes()[i*n:(i+1)*n], dst)
	}
	done := make(chan rdma.Status, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for i := 0; ; i++ {
			a.PostSend(uint64(i), src.Bytes(), src, rdma.FlagSignaled)
			wc, err := a.GetSendComp(ctx)
			if err != nil {
				done <- rdma.StatusFatal // the queue ended: also noticed
				return
			}
			if wc.Status != rdma.StatusSuccess {
				done <- wc.Status
				return
			}
		}
	}()
	go func() {
		// Keep the receiver fed until it closes.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for {
			wc, err := b.GetRecvComp(ctx)
			if err != nil || wc.Status != rdma.StatusSuccess {
				return
			}
			b.PostRecv(wc.WRID, dst.Bytes()[int(wc.WRID)*n:(int(wc.WRID)+1)*n], dst)
		}
	}()
	time.Sleep(10 * time.Millisecond)
	b.Close()
	if err := dst.Deregister(); err != nil {
		t.Fatalf("Deregister after Close: %v", err)
	}
	if st := <-done; st == rdma.StatusSuccess {
		t.Fatal("sender did not notice the close")
	}
}

// TestAllocNUMANode: Alloc places memory with mbind; a node that does not
// exist is an error, not silently ignored.
func TestAllocNUMANode(t *testing.T) {
	dev, err := rdma.OpenConfig("shm", rdma.Config{NUMANode: 1000, PlaceNUMA: true})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	if mr, err := dev.Alloc(4096, rdma.AccessLocalWrite); err == nil {
		mr.Deregister()
		t.Skip("mbind accepted node 1000 (or is not supported here)")
	}
	def, _ := rdma.Open("shm")
	defer def.Close()
	mr, err := def.Alloc(1<<20, rdma.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	mr.Deregister()
}
