//go:build linux

package shm

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// The cross-process tests re-run this test binary as the peer, as os/exec's
// tests do: TestShmChild plays the child's part when GORUN_SHM_CHILD is set.

const childToken = "cross-process secret"

func startChild(t testing.TB, role, addr string, env ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestShmChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), append([]string{"GORUN_SHM_CHILD=" + role, "GORUN_SHM_ADDR=" + addr}, env...)...)
	out := new(bytes.Buffer)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd, out
}

func TestShmChild(t *testing.T) {
	role := os.Getenv("GORUN_SHM_CHILD")
	if role == "" {
		t.Skip("the peer process of the cross-process tests")
	}
	if d, err := time.ParseDuration(os.Getenv("GORUN_SHM_SPIN_AFTER_WAKE")); err == nil {
		spinAfterWake = d
	}
	spin, _ := time.ParseDuration(os.Getenv("GORUN_SHM_SPIN")) // Config.Spin; unset: the default
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dev, err := rdma.OpenConfig("shm", rdma.Config{Token: []byte(childToken), RNRRetry: -1, Spin: spin})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	switch role {
	case "ring":
		childRing(ctx, t, dev)
		return
	case "pong-cq", "pong-cq-send":
		childPongCQ(ctx, t, dev, role == "pong-cq")
		return
	}
	c, err := dev.Dial(ctx, os.Getenv("GORUN_SHM_ADDR"))
	if err != nil {
		t.Fatal(err)
	}
	switch role {
	case "hang":
		time.Sleep(time.Minute)
		return
	case "pong":
		// Answer every 8-byte message until the connection ends.
		buf, _ := dev.Alloc(64, rdma.AccessLocalWrite)
		c.PostRecv(0, buf.Bytes()[:8], buf)
		for rounds := 0; ; rounds++ {
			if wc, err := c.GetRecvComp(ctx); err != nil || wc.Status != rdma.StatusSuccess {
				printChildFutex(rounds) // the parent closed
				return
			}
			c.PostRecv(0, buf.Bytes()[:8], buf)
			c.PostSend(0, buf.Bytes()[8:16], buf, 0)
		}
	}
	// echo: expose an Alloc'd and a registered region, then answer each
	// write-with-immediate with a checksum of the region it names.
	acc := rdma.AccessLocalWrite | rdma.AccessRemoteWrite | rdma.AccessRemoteRead
	arena, err := dev.Alloc(1<<20, acc)
	if err != nil {
		t.Fatal(err)
	}
	goMem, err := dev.Register(make([]byte, 1<<20), acc)
	if err != nil {
		t.Fatal(err)
	}
	msg, _ := dev.Alloc(4096, rdma.AccessLocalWrite)
	for i := 0; i < 4; i++ {
		c.PostRecv(uint64(i), msg.Bytes()[1024+i*8:1032+i*8], msg)
	}
	d := msg.Bytes()[:24]
	binary.LittleEndian.PutUint64(d[0:], arena.Addr())
	binary.LittleEndian.PutUint32(d[8:], arena.RKey())
	binary.LittleEndian.PutUint64(d[12:], goMem.Addr())
	binary.LittleEndian.PutUint32(d[20:], goMem.RKey())
	c.PostSend(100, d, msg, 0)
	for {
		wc, err := c.GetRecvComp(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if wc.Status != rdma.StatusSuccess {
			t.Fatalf("child receive: %+v", wc)
		}
		if !wc.HasImm {
			return // "bye"
		}
		region := arena.Bytes()
		if wc.Imm == 2 {
			region = goMem.Bytes()
		}
		binary.LittleEndian.PutUint64(msg.Bytes()[64:], checksum(region[:wc.ByteLen]))
		c.PostRecv(wc.WRID, msg.Bytes()[1024+wc.WRID*8:1032+wc.WRID*8], msg)
		c.PostSend(101, msg.Bytes()[64:72], msg, 0)
	}
}

func checksum(b []byte) uint64 {
	var s uint64 = 14695981039346656037
	for _, x := range b {
		s = (s ^ uint64(x)) * 1099511628211
	}
	return s
}

func listenOne(t *testing.T, cfg rdma.Config) (rdma.Device, rdma.Listener) {
	t.Helper()
	dev, err := rdma.OpenConfig("shm", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	ln, err := dev.Listen(testCtx(t), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return dev, ln
}

func TestCrossProcess(t *testing.T) {
	for _, cma := range []string{"1", "0"} {
		t.Run("cma="+cma, func(t *testing.T) {
			t.Setenv("GORUN_SHM_CMA", cma) // both sides: the child inherits it
			dev, ln := listenOne(t, rdma.Config{Token: []byte(childToken)})
			_, out := startChild(t, "echo", ln.Addr().String())
			c, err := ln.Accept(testCtx(t))
			if err != nil {
				t.Fatalf("accept: %v\nchild:\n%s", err, out)
			}
			defer c.Close()
			if got := c.(*conn).cma; got != (cma == "1") {
				t.Fatalf("cma = %v", got)
			}
			msg, _ := dev.Alloc(1<<20, rdma.AccessLocalWrite)
			c.PostRecv(1, msg.Bytes()[:64], msg)
			mustWC(t, c.GetRecvComp, rdma.WC{WRID: 1, Opcode: rdma.OpRecv})
			d := msg.Bytes()[:24]
			regions := [][2]uint64{
				{binary.LittleEndian.Uint64(d[0:]), uint64(binary.LittleEndian.Uint32(d[8:]))},
				{binary.LittleEndian.Uint64(d[12:]), uint64(binary.LittleEndian.Uint32(d[20:]))},
			}
			src := msg.Bytes()[4096:]
			for i := range src {
				src[i] = byte(i*31 + i>>9)
			}
			for imm, r := range regions {
				n := 300000 + imm
				c.PostRecv(2, msg.Bytes()[100:108], msg)
				if err := c.PostWriteImm(3, src[:n], msg, 0, r[0], uint32(r[1]), uint32(imm+1)); err != nil {
					t.Fatal(err)
				}
				mustWC(t, c.GetRecvComp, rdma.WC{WRID: 2, Opcode: rdma.OpRecv})
				if got, want := binary.LittleEndian.Uint64(msg.Bytes()[100:]), checksum(src[:n]); got != want {
					t.Fatalf("region %d: checksum %x, want %x", imm, got, want)
				}
				back := msg.Bytes()[400000 : 400000+n]
				c.PostRead(4, back, msg, rdma.FlagSignaled, r[0], uint32(r[1]))
				mustWC(t, c.GetSendComp, rdma.WC{WRID: 4, Opcode: rdma.OpRead})
				if !bytes.Equal(back, src[:n]) {
					t.Fatalf("region %d: read back differs", imm)
				}
				// Out of bounds: the peer's table refuses it.
				if imm == 1 {
					c.PostWrite(5, src[:16], msg, 0, r[0]+(1<<20)-8, uint32(r[1]))
					mustWC(t, c.GetSendComp, rdma.WC{WRID: 5, Status: rdma.StatusRemoteAccessError, Opcode: rdma.OpWrite})
				}
			}
		})
	}
}

func TestPeerDeath(t *testing.T) {
	dev, ln := listenOne(t, rdma.Config{Token: []byte(childToken), RNRRetry: -1})
	cmd, out := startChild(t, "hang", ln.Addr().String())
	c, err := ln.Accept(testCtx(t))
	if err != nil {
		t.Fatalf("accept: %v\nchild:\n%s", err, out)
	}
	defer c.Close()
	buf, _ := dev.Alloc(64, rdma.AccessLocalWrite)
	c.PostRecv(1, buf.Bytes(), buf)
	c.PostSend(2, buf.Bytes()[:8], buf, rdma.FlagSignaled) // RNR forever: the child posts nothing
	time.Sleep(10 * time.Millisecond)
	start := time.Now()
	cmd.Process.Kill()
	mustWC(t, c.GetRecvComp, rdma.WC{WRID: 1, Status: rdma.StatusFlushed, Opcode: rdma.OpRecv})
	mustWC(t, c.GetSendComp, rdma.WC{WRID: 2, Status: rdma.StatusFlushed, Opcode: rdma.OpSend})
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("death noticed after %v", d)
	}
	if err := c.Err(); !errors.Is(err, rdma.ErrClosed) || !strings.Contains(err.Error(), "pid") {
		t.Fatalf("Err() = %v", err)
	}
	if _, err := c.GetSendComp(testCtx(t)); !errors.Is(err, rdma.ErrClosed) {
		t.Fatalf("GetSendComp = %v", err)
	}
}

// TestCloseWaitsForPeerCopy: Close waits for a peer's direct copy into a
// receive buffer (its in-flight counter), and stops waiting when the peer
// process dies with the counter still up (killed in the middle of a copy).
func TestCloseWaitsForPeerCopy(t *testing.T) {
	dev, ln := listenOne(t, rdma.Config{Token: []byte(childToken)})
	cmd, out := startChild(t, "hang", ln.Addr().String())
	c, err := ln.Accept(testCtx(t))
	if err != nil {
		t.Fatalf("accept: %v\nchild:\n%s", err, out)
	}
	buf, _ := dev.Alloc(64, rdma.AccessLocalWrite)
	c.PostRecv(1, buf.Bytes(), buf)
	c.(*conn).local.u32(offDirectUsers).Add(1) // the child "is copying"
	closed := make(chan struct{})
	go func() {
		c.Close()
		close(closed)
	}()
	select {
	case <-closed:
		t.Fatal("Close did not wait for the peer's copy in flight")
	case <-time.After(100 * time.Millisecond):
	}
	cmd.Process.Kill()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close still waits after the peer died")
	}
	if err := buf.Deregister(); err != nil {
		t.Fatal(err)
	}
}

// childRing is one rank of TestProcessRing: listen on its own path, dial
// the next rank's, accept the previous one, swap region addresses, then
// run the ring rounds of TestRingOfRanks.
func childRing(ctx context.Context, t *testing.T, dev rdma.Device) {
	rank, _ := strconv.Atoi(os.Getenv("GORUN_SHM_RANK"))
	ranks, _ := strconv.Atoi(os.Getenv("GORUN_SHM_RANKS"))
	dir := os.Getenv("GORUN_SHM_ADDR")
	path := func(r int) string { return filepath.Join(dir, fmt.Sprintf("rank%d.sock", r)) }
	ln, err := dev.Listen(ctx, path(rank))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var next rdma.Conn
	for next == nil {
		if next, err = dev.Dial(ctx, path((rank+1)%ranks)); err != nil {
			if ctx.Err() != nil {
				t.Fatal(err)
			}
			next = nil
			time.Sleep(5 * time.Millisecond) // the next rank is not listening yet
		}
	}
	prev, err := ln.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	own, _ := dev.Alloc(ringRounds*8, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
	ctl, _ := dev.Alloc(64, rdma.AccessLocalWrite)
	next.PostRecv(0, ctl.Bytes()[32:44], ctl)
	binary.LittleEndian.PutUint64(ctl.Bytes()[0:], own.Addr())
	binary.LittleEndian.PutUint32(ctl.Bytes()[8:], own.RKey())
	prev.PostSend(0, ctl.Bytes()[:12], ctl, rdma.FlagSignaled)
	if wc, err := prev.GetSendComp(ctx); err != nil || wc.Status != rdma.StatusSuccess {
		t.Fatalf("rank %d: address send: %+v %v", rank, wc, err)
	}
	if wc, err := next.GetRecvComp(ctx); err != nil || wc.Status != rdma.StatusSuccess {
		t.Fatalf("rank %d: address receive: %+v %v", rank, wc, err)
	}
	succAddr := binary.LittleEndian.Uint64(ctl.Bytes()[32:])
	succKey := binary.LittleEndian.Uint32(ctl.Bytes()[40:])
	if err := runRank(ctx, rank, ranks, dev, next, prev, succAddr, succKey, own, ringRounds); err != nil {
		t.Fatal(err)
	}
	// Closing now is safe: our last send completed, so it was published,
	// and a peer's close delivers what was published before it.
}

const ringRounds = 300

// TestProcessRing is TestRingOfRanks with 4 processes (twice as many as
// cores): real doorbell sleeps and wake-ups across address spaces.
func TestProcessRing(t *testing.T) {
	const ranks = 4
	dir := t.TempDir()
	cmds := make([]*exec.Cmd, ranks)
	outs := make([]*bytes.Buffer, ranks)
	for r := 0; r < ranks; r++ {
		cmds[r], outs[r] = startChild(t, "ring", dir, fmt.Sprintf("GORUN_SHM_RANK=%d", r), fmt.Sprintf("GORUN_SHM_RANKS=%d", ranks))
	}
	done := make(chan int, ranks)
	for r := range cmds {
		go func() {
			cmds[r].Wait()
			done <- r
		}()
	}
	waited := 0
	// Before startChild's cleanups (they run after this one): a failure
	// ends the test with children running, and their Wait here must end
	// before the cleanup's.
	t.Cleanup(func() {
		for _, c := range cmds {
			c.Process.Kill()
		}
		for ; waited < ranks; waited++ {
			<-done
		}
	})
	timeout := time.After(60 * time.Second)
	for range ranks {
		select {
		case r := <-done:
			waited++
			if !cmds[r].ProcessState.Success() {
				t.Fatalf("rank %d: %v\n%s", r, cmds[r].ProcessState, outs[r])
			}
		case <-timeout:
			for r := range outs {
				t.Logf("rank %d:\n%s", r, outs[r])
			}
			t.Fatal("ring did not finish in 60s")
		}
	}
}
