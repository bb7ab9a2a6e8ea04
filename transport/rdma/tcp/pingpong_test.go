package tcp

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// BenchmarkPingPongProcess is an 8-byte write-with-immediate ping-pong
// with a peer process over loopback; ns/op is one way (half a round trip).
// cq=poll: both ends spin on CQ.Poll of a shared CQ (the caller drives the
// sockets); cq=yield: the same with sched_yield after an empty Poll (for a
// loaded machine); cq=arm: Poll, then Arm, Poll and sleep on Notify
// (rdma.WaitComp: the watcher's wake-up); cq=get: both ends block in
// GetRecvComp on private queues.
//
//	GOMAXPROCS=1 go test -run '^$' -bench PingPongProcess -benchtime=20000x -count=5 ./transport/rdma/tcp/
//
// Spinning ends need a CPU each: on a loaded machine run the test binary
// under chrt -f 10 (both processes), or the figures measure the scheduler.
func BenchmarkPingPongProcess(b *testing.B) {
	for _, mode := range []string{"poll", "yield", "arm", "get"} {
		b.Run("cq="+mode, func(b *testing.B) { pingPong(b, mode) })
	}
}

// pingPongEnv makes the test binary a ping-pong peer in the given mode.
const pingPongEnv = "GORUN_TCP_PINGPONG"

// endpoint is one end of the ping-pong: a conn, its 8-byte target region
// and how it waits for the peer's write with immediate.
type endpoint struct {
	c    rdma.Conn
	q    rdma.CQ // nil: GetRecvComp
	mode string
	mr   *rdma.MR
	wcs  []rdma.WC
	peer [12]byte // the peer's region: addr, rkey
}

func newEndpoint(d rdma.Device, mode string) (*endpoint, rdma.QPInit, error) {
	e := &endpoint{wcs: make([]rdma.WC, 32), mode: mode}
	var init rdma.QPInit
	if mode != "get" {
		q, err := d.CreateCQ(0)
		if err != nil {
			return nil, init, err
		}
		e.q, init = q, rdma.QPInit{SendCQ: q, RecvCQ: q}
	}
	mr, err := d.Alloc(64, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
	if err != nil {
		return nil, init, err
	}
	e.mr = mr
	return e, init, nil
}

// wait returns the next receive completion.
func (e *endpoint) wait() (rdma.WC, error) {
	if e.q == nil {
		return e.c.GetRecvComp(context.Background())
	}
	for {
		var wc rdma.WC
		if e.mode == "arm" {
			var err error
			if wc, err = rdma.WaitComp(context.Background(), e.q, nil); err != nil {
				return wc, err
			}
		} else if e.q.Poll(e.wcs[:1]) == 1 {
			wc = e.wcs[0]
		} else {
			if e.mode == "yield" {
				schedYield()
			}
			continue
		}
		if wc.Opcode >= rdma.OpRecv || wc.Status != rdma.StatusSuccess {
			return wc, nil
		}
	}
}

// exchange swaps region addresses with the peer by a send each way.
func (e *endpoint) exchange() error {
	msg := make([]byte, 12)
	binary.LittleEndian.PutUint64(msg, e.mr.Addr())
	binary.LittleEndian.PutUint32(msg[8:], e.mr.RKey())
	if err := e.c.PostRecv(0, e.mr.Bytes()[16:28], e.mr); err != nil {
		return err
	}
	if err := e.c.PostSend(0, msg, nil, rdma.FlagInline); err != nil {
		return err
	}
	wc, err := e.wait()
	if err != nil || wc.Status != rdma.StatusSuccess {
		return fmt.Errorf("exchange: %+v %v", wc, err)
	}
	copy(e.peer[:], e.mr.Bytes()[16:28])
	return nil
}

// pong answers one ping; false when the conn ended.
func (e *endpoint) round(ping bool) error {
	addr, rkey := binary.LittleEndian.Uint64(e.peer[:]), binary.LittleEndian.Uint32(e.peer[8:])
	if err := e.c.PostRecv(1, nil, nil); err != nil {
		return err
	}
	if ping {
		if err := e.c.PostWriteImm(1, e.mr.Bytes()[:8], e.mr, 0, addr, rkey, 1); err != nil {
			return err
		}
	}
	wc, err := e.wait()
	if err != nil {
		return err
	}
	if wc.Status != rdma.StatusSuccess || wc.Opcode != rdma.OpRecvWriteImm {
		return fmt.Errorf("wc %+v", wc)
	}
	if !ping {
		return e.c.PostWriteImm(1, e.mr.Bytes()[:8], e.mr, 0, addr, rkey, 2)
	}
	return nil
}

// pingPongPeer is the child: it prints its address, accepts one conn and
// answers pings until the conn ends.
func pingPongPeer(mode string) int {
	d, err := rdma.Open("tcp")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ln, err := d.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(ln.Addr())
	e, init, err := newEndpoint(d, mode)
	if err == nil {
		e.c, err = ln.AcceptQP(ctx, init)
	}
	if err == nil {
		err = e.exchange()
	}
	for err == nil {
		err = e.round(false)
	}
	return 0 // the parent closed the conn
}

func pingPong(b *testing.B, mode string) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), pingPongEnv+"="+mode)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		b.Fatal(err)
	}
	go io.Copy(io.Discard, out)
	d, err := rdma.Open("tcp")
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	e, init, err := newEndpoint(d, mode)
	if err != nil {
		b.Fatal(err)
	}
	ctx := testCtx(b)
	if e.c, err = d.DialQP(ctx, strings.TrimSpace(addr), init); err != nil {
		b.Fatal(err)
	}
	if err := e.exchange(); err != nil {
		b.Fatal(err)
	}
	for range 1000 { // warm up both ends
		if err := e.round(true); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(8)
	b.ResetTimer()
	for range (b.N + 1) / 2 {
		if err := e.round(true); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	e.c.Close()
}
