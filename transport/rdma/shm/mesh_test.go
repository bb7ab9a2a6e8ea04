//go:build linux

package shm

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// TestRingOfRanks runs 6 ranks (one device each, so more ranks than cores)
// passing messages around a ring, each also writing into its successor's
// region, and checks every message and byte arrives: a lost wake-up shows
// up as a timeout.
func TestRingOfRanks(t *testing.T) {
	const ranks, rounds = 6, 300
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	devs := make([]rdma.Device, ranks)
	lns := make([]rdma.Listener, ranks)
	for i := range devs {
		d, err := rdma.OpenConfig("shm", rdma.Config{RNRRetry: -1}) // a rank may send before its successor posts
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		devs[i] = d
		if lns[i], err = d.Listen(ctx, "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
	}
	next := make([]rdma.Conn, ranks) // rank i -> i+1
	prev := make([]rdma.Conn, ranks) // rank i <- i-1
	var wg sync.WaitGroup
	errs := make(chan error, 2*ranks)
	// Each rank dials its successor, then accepts its predecessor: the
	// dial must not wait for the successor's Accept.
	for i := range devs {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			c, err := devs[i].Dial(ctx, lns[(i+1)%ranks].Addr().String())
			if err != nil {
				errs <- err
				return
			}
			next[i] = c
			if prev[i], err = lns[i].Accept(ctx); err != nil {
				errs <- err
			}
		}(i)
	}
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	// Each rank exposes a region its predecessor writes round r into.
	acc := rdma.AccessLocalWrite | rdma.AccessRemoteWrite
	regions := make([]*rdma.MR, ranks)
	for i := range regions {
		regions[i], _ = devs[i].Alloc(rounds*8, acc)
	}
	for i := 0; i < ranks; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			succ := regions[(i+1)%ranks]
			errs <- runRank(ctx, i, ranks, devs[i], next[i], prev[i], succ.Addr(), succ.RKey(), regions[i], rounds)
		}(i)
	}
	wg.Wait()
	for i := 0; i < ranks; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// runRank is one rank's part: each round, write into the successor's
// region, then send it a message; receive the predecessor's message and
// check that its write is already in place.
func runRank(ctx context.Context, rank, ranks int, dev rdma.Device, next, prev rdma.Conn, succAddr uint64, succKey uint32, own *rdma.MR, rounds int) error {
	buf, _ := dev.Alloc(4096, rdma.AccessLocalWrite)
	b := buf.Bytes()
	const depth = 8
	for j := 0; j < depth; j++ {
		prev.PostRecv(uint64(j), b[1024+j*16:1024+j*16+16], buf)
	}
	for r := 0; r < rounds; r++ {
		binary.LittleEndian.PutUint64(b[0:], uint64(rank*1e6+r))
		if err := next.PostWrite(0, b[:8], buf, 0, succAddr+uint64(r*8), succKey); err != nil {
			return err
		}
		// The send follows the write: the successor may check the write
		// as soon as the message arrives.
		binary.LittleEndian.PutUint64(b[8:], uint64(r))
		if err := next.PostSend(1, b[8:16], buf, rdma.FlagSignaled); err != nil {
			return err
		}
		wc, err := next.GetSendComp(ctx)
		if err != nil || wc.Status != rdma.StatusSuccess {
			return fmt.Errorf("rank %d round %d send: %+v %v", rank, r, wc, err)
		}
		wc, err = prev.GetRecvComp(ctx)
		if err != nil || wc.Status != rdma.StatusSuccess {
			return fmt.Errorf("rank %d round %d recv: %+v %v", rank, r, wc, err)
		}
		slot := b[1024+wc.WRID*16 : 1024+wc.WRID*16+16]
		if got := binary.LittleEndian.Uint64(slot); got != uint64(r) {
			return fmt.Errorf("rank %d: message %d in round %d", rank, got, r)
		}
		predRank := (rank + ranks - 1) % ranks
		if got := binary.LittleEndian.Uint64(own.Bytes()[r*8:]); got != uint64(predRank*1e6+r) {
			return fmt.Errorf("rank %d round %d: write not in place before the send (%d)", rank, r, got)
		}
		prev.PostRecv(wc.WRID, slot, buf)
	}
	return nil
}
