package tcp

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// A full mesh of devices, as a collective uses them: every rank writes its
// block into every other rank's region through that peer's connection and
// then sends a note; a rank that has all notes has all blocks in place.
// Regions and keys are device-wide, shared by all of a rank's connections.
func TestMesh(t *testing.T) {
	const ranks, block = 5, 64 << 10
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	devs := make([]rdma.Device, ranks)
	regions := make([]*rdma.MR, ranks)
	lns := make([]rdma.Listener, ranks)
	for r := range ranks {
		d, err := rdma.OpenConfig("tcp", rdma.Config{Token: []byte("mesh")})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		devs[r] = d
		if regions[r], err = d.Alloc(ranks*block, rdma.AccessLocalWrite|rdma.AccessRemoteWrite); err != nil {
			t.Fatal(err)
		}
		if lns[r], err = d.Listen(ctx, "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
	}
	// conns[i][j] is rank i's end of the connection to rank j: the lower
	// rank dials.
	conns := make([][]rdma.Conn, ranks)
	for i := range conns {
		conns[i] = make([]rdma.Conn, ranks)
	}
	for i := range ranks {
		for j := i + 1; j < ranks; j++ {
			ch := make(chan rdma.Conn, 1)
			go func() {
				c, err := lns[j].Accept(ctx)
				if err != nil {
					t.Error(err)
				}
				ch <- c
			}()
			c, err := devs[i].Dial(ctx, lns[j].Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			conns[i][j], conns[j][i] = c, <-ch
		}
	}
	var wg sync.WaitGroup
	for r := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			own := regions[r].Bytes()[r*block : (r+1)*block]
			fill(own, byte(r*31))
			notes := make([]byte, ranks)
			nMR, _ := devs[r].Register(notes, rdma.AccessLocalWrite)
			for p := range ranks {
				if p != r {
					conns[r][p].PostRecv(uint64(p), notes[p:p+1], nMR)
				}
			}
			for p := range ranks {
				if p == r {
					continue
				}
				c, dst := conns[r][p], regions[p]
				if err := c.PostWrite(1, own, regions[r], 0, dst.Addr()+uint64(r*block), dst.RKey()); err != nil {
					t.Error(err)
					return
				}
				if err := c.PostSend(2, []byte{byte(r)}, nil, rdma.FlagInline|rdma.FlagSignaled); err != nil {
					t.Error(err)
					return
				}
			}
			for p := range ranks {
				if p == r {
					continue
				}
				if wc, err := conns[r][p].GetRecvComp(ctx); err != nil || wc.Status != 0 {
					t.Errorf("rank %d from %d: %+v %v", r, p, wc, err)
					return
				}
				if wc, err := conns[r][p].GetSendComp(ctx); err != nil || wc.WRID != 2 {
					t.Errorf("rank %d to %d: %+v %v", r, p, wc, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	want := make([]byte, block)
	for r := range ranks {
		for p := range ranks {
			fill(want, byte(p*31))
			if !bytes.Equal(regions[r].Bytes()[p*block:(p+1)*block], want) {
				t.Fatalf("rank %d: block of rank %d wrong", r, p)
			}
		}
	}
}
