//go:build linux && cgo && rdma

package verbs

import (
	"context"
	"errors"
	"flag"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// asyncEvents sees the asynchronous events the readers read while the
// test runs (testHookAsyncEvent).
type asyncEvents chan [2]int // type, port

func watchAsyncEvents(t *testing.T) asyncEvents {
	ch := make(asyncEvents, 256)
	hook := func(typ, port int) {
		select {
		case ch <- [2]int{typ, port}:
		default:
		}
	}
	testHookAsyncEvent.Store(&hook)
	t.Cleanup(func() { testHookAsyncEvent.Store(nil) })
	return ch
}

// wait returns once an event of type typ was read, or fails the test when
// ctx ends first.
func (ev asyncEvents) wait(t *testing.T, ctx context.Context, typ int, what string) {
	t.Helper()
	for {
		select {
		case e := <-ev:
			if e[0] == typ {
				return
			}
			t.Logf("event %d (port %d)", e[0], e[1])
		case <-ctx.Done():
			t.Fatalf("no %s within the test's time: %v", what, ctx.Err())
		}
	}
}

// drainRecv returns the receive completions of c until GetRecvComp
// fails, and that error.
func drainRecv(t *testing.T, ctx context.Context, c rdma.Conn) ([]rdma.WC, error) {
	t.Helper()
	var wcs []rdma.WC
	for {
		wc, err := c.GetRecvComp(ctx)
		if err != nil {
			return wcs, err
		}
		wcs = append(wcs, wc)
	}
}

// wantEventErr checks that err is the connection's (or CQ's) failure by
// event name, naming the peer if peer is not empty.
func wantEventErr(t *testing.T, what string, err error, name, peer string) {
	t.Helper()
	if err == nil || !errors.Is(err, ErrAsyncEvent) || !strings.Contains(err.Error(), name) {
		t.Fatalf("%s: %v, want an error wrapping ErrAsyncEvent naming %s", what, err, name)
	}
	if peer != "" && !strings.Contains(err.Error(), peer) {
		t.Errorf("%s: %v does not name the peer %s", what, err, peer)
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		t.Fatalf("%s: %v: waited for its context", what, err)
	}
}

// TestAsyncCQOverrun: a receive CQ that overruns raises IBV_EVENT_CQ_ERR
// (rxe: the responder finds the CQ full, and moves the QP to the error
// state). The receiver's GetRecvComp returns what the CQ held, every
// other receive flushed, then an error naming the event and the peer,
// instead of waiting for its context (no completion would ever come: rxe
// drops the rest); Conn.Err and CQ.Err say so; and the peer hears of it
// (its waiter ends with the disconnect). The provider's room accounting,
// which exists to prevent an overrun, is lifted for the test.
func TestAsyncCQOverrun(t *testing.T) {
	events := watchAsyncEvents(t)
	d := openDev(t, rdma.Config{RNRRetry: -1})
	small := newCQ(t, d, 1)
	sq := small.(*cq)
	cli, srv := pairQP(t, d, d, rdma.QPInit{}, rdma.QPInit{RecvCQ: small})
	sq.mu.Lock()
	hwDepth := sq.depth
	sq.depth = 64
	sq.mu.Unlock()
	const n = 4
	rb, _ := d.Alloc(n*64, rdma.AccessLocalWrite)
	for i := 0; i < n; i++ {
		if err := srv.PostRecv(uint64(i), rb.Bytes()[i*64:(i+1)*64], rb); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < n; i++ {
		if err := cli.PostSend(uint64(100+i), []byte("x"), nil, rdma.FlagInline|rdma.FlagSignaled); err != nil {
			t.Fatal(err)
		}
	}
	ctx := ctxT(t)
	events.wait(t, ctx, eventCQErr, "IBV_EVENT_CQ_ERR")
	peer := cli.(*conn).local
	wcs, err := drainRecv(t, ctx, srv)
	wantEventErr(t, "GetRecvComp after the overrun", err, "IBV_EVENT_CQ_ERR", peer)
	if len(wcs) != n {
		t.Fatalf("%d receive completions %+v, want each of the %d receives once", len(wcs), wcs, n)
	}
	for i, wc := range wcs {
		ok := wc.Status == rdma.StatusFlushed || (i < hwDepth && wc.Status == rdma.StatusSuccess)
		if wc.WRID != uint64(i) || !ok {
			t.Fatalf("receive completion %d: %+v, want wrid %d, success (the CQ holds %d) or flushed", i, wc, i, hwDepth)
		}
	}
	wantEventErr(t, "srv.Err", srv.Err(), "IBV_EVENT_CQ_ERR", peer)
	wantEventErr(t, "CQ.Err", sq.Err(), "IBV_EVENT_CQ_ERR", "")
	// The receiver moved its QP to the error state and disconnected.
	if _, err := cli.GetRecvComp(ctx); !errors.Is(err, rdma.ErrClosed) {
		t.Fatalf("the sender's GetRecvComp: %v, want the peer's disconnect", err)
	}
}

// TestAsyncQPFatal: a QP event (IBV_EVENT_QP_FATAL) fails its connection
// only: its posted receive comes back flushed, then GetRecvComp returns
// an error naming the event and the peer, and so does Err; the peer
// hears of it; another connection of the device is untouched; an
// informational event (IBV_EVENT_COMM_EST) changes nothing. rxe (Linux
// 6.1) raises no QP event we could provoke (none after a remote access
// error: TestAsyncRemoteAccess logs them), so the event is fed to the
// dispatcher the reader hands the real events to, with the QP's real
// token.
func TestAsyncQPFatal(t *testing.T) {
	d := openDev(t, rdma.Config{})
	cli, srv := pair(t, d)
	other, other2 := pair(t, d)
	rb, _ := d.Alloc(64, rdma.AccessLocalWrite)
	if err := srv.PostRecv(7, rb.Bytes(), rb); err != nil {
		t.Fatal(err)
	}
	sc := srv.(*conn)
	dispatchAsync(d.(*device).ctx, eventCommEst, 0, sc.asyncTok)
	if err := srv.Err(); err != nil {
		t.Fatalf("an informational event failed the connection: %v", err)
	}
	dispatchAsync(d.(*device).ctx, eventQPFatal, 0, sc.asyncTok)
	ctx := ctxT(t)
	peer := cli.(*conn).local
	wcs, err := drainRecv(t, ctx, srv)
	wantEventErr(t, "GetRecvComp", err, "IBV_EVENT_QP_FATAL", peer)
	if len(wcs) != 1 || wcs[0].WRID != 7 || wcs[0].Status != rdma.StatusFlushed {
		t.Fatalf("receive completions %+v, want wrid 7 flushed", wcs)
	}
	wantEventErr(t, "Err", srv.Err(), "IBV_EVENT_QP_FATAL", peer)
	if _, err := cli.GetRecvComp(ctx); !errors.Is(err, rdma.ErrClosed) {
		t.Fatalf("the peer's GetRecvComp: %v, want the disconnect", err)
	}
	if err := other.Err(); err != nil {
		t.Fatalf("another connection failed: %v", err)
	}
	if err := other2.PostRecv(1, rb.Bytes()[:8], rb); err != nil {
		t.Fatal(err)
	}
	if err := other.PostSend(2, []byte("ok"), nil, rdma.FlagInline|rdma.FlagSignaled); err != nil {
		t.Fatal(err)
	}
	wc, err := other2.GetRecvComp(ctx)
	mustWC(t, wc, err, 1, rdma.OpRecv)
}

// TestAsyncDeviceFatal: after IBV_EVENT_DEVICE_FATAL the device refuses
// new work at once, with an error wrapping ErrAsyncEvent that names the
// event and the device: Dial, Listen, Accept (one that waits when the
// event comes returns), CreateCQ, Register and Alloc; what existed fails
// as before (a connection's receive flushed, then the event's error; a
// shared CQ's Err). Before it, a connection that names a CQ failed by
// IBV_EVENT_CQ_ERR is refused with that CQ's error. rxe (Linux 6.1)
// raises neither event on demand, so they are fed to the dispatcher the
// reader hands the real events to, as TestAsyncQPFatal does.
func TestAsyncDeviceFatal(t *testing.T) {
	ip := vmIP(t)
	d := openDev(t, rdma.Config{})
	dev := d.(*device)
	ctx := ctxT(t)
	ln, err := d.Listen(ctx, ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	short := func() context.Context { // for a call that, refused, returns at once
		c, cancel := context.WithTimeout(ctx, 3*time.Second)
		t.Cleanup(cancel)
		return c
	}

	bad := newCQ(t, d, 0)
	dispatchAsync(dev.ctx, eventCQErr, 0, bad.(*cq).asyncTok)
	_, err = d.DialQP(short(), ln.Addr().String(), both(bad))
	wantEventErr(t, "DialQP with a CQ that IBV_EVENT_CQ_ERR failed", err, "IBV_EVENT_CQ_ERR", "")

	_, srv := pair(t, d)
	shared := newCQ(t, d, 0)
	rb, _ := d.Alloc(64, rdma.AccessLocalWrite)
	if err := srv.PostRecv(5, rb.Bytes(), rb); err != nil {
		t.Fatal(err)
	}
	accepted := make(chan error, 1)
	go func() {
		c, err := ln.Accept(ctx)
		if c != nil {
			c.Close()
		}
		accepted <- err
	}()
	dispatchAsync(dev.ctx, eventDevFatal, 0, 0)

	want := func(what string, err error) {
		t.Helper()
		wantEventErr(t, what, err, "IBV_EVENT_DEVICE_FATAL", "")
		if !strings.Contains(err.Error(), dev.name) {
			t.Errorf("%s: %v does not name the device %s", what, err, dev.name)
		}
	}
	want("an Accept that waited", <-accepted)
	_, err = d.Dial(short(), ln.Addr().String())
	want("Dial", err)
	_, err = d.Listen(short(), ip+":0")
	want("Listen", err)
	_, err = ln.Accept(short())
	want("Accept", err)
	_, err = d.CreateCQ(0)
	want("CreateCQ", err)
	_, err = d.Register(make([]byte, 64), rdma.AccessLocalWrite)
	want("Register", err)
	_, err = d.Alloc(64, rdma.AccessLocalWrite)
	want("Alloc", err)
	want("the shared CQ's Err", shared.Err())
	wcs, err := drainRecv(t, ctx, srv)
	want("GetRecvComp of a connection", err)
	if len(wcs) != 1 || wcs[0].WRID != 5 || wcs[0].Status != rdma.StatusFlushed {
		t.Fatalf("receive completions %+v, want wrid 5 flushed", wcs)
	}
}

// TestDialInProgressEnds: a Dial that waits for rdma_cm (here for an
// answer to a connect request that its listener never accepts) ends as
// soon as its device dies (IBV_EVENT_DEVICE_FATAL), with the event's
// error, or closes, with ErrClosed. Before, both waited for the dial's
// context or rdma_cm's own retries (the dial of the fatal case was
// still waiting 5 s after the event).
func TestDialInProgressEnds(t *testing.T) {
	ip := vmIP(t)
	for _, how := range []string{"fatal", "close"} {
		t.Run(how, func(t *testing.T) {
			srv := openDev(t, rdma.Config{})
			ctx := ctxT(t)
			ln, err := srv.Listen(ctx, ip+":0") // never accepts
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			d := openDev(t, rdma.Config{})
			dev := d.(*device)
			dialCtx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			dialed := make(chan error, 1)
			go func() {
				c, err := d.Dial(dialCtx, ln.Addr().String())
				if c != nil {
					c.Close()
				}
				dialed <- err
			}()
			// Wait until the dial waits for rdma_cm.
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				dev.mu.Lock()
				n := len(dev.dials)
				dev.mu.Unlock()
				if n > 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the dial never started")
				}
			}
			time.Sleep(300 * time.Millisecond) // past address and route resolution
			select {
			case err := <-dialed:
				t.Fatalf("the dial ended before the device did: %v", err)
			default:
			}
			start := time.Now()
			if how == "fatal" {
				dispatchAsync(dev.ctx, eventDevFatal, 0, 0)
			} else {
				d.Close()
			}
			select {
			case err := <-dialed:
				t.Logf("Dial: %v (%v after the device's %s)", err, time.Since(start).Round(time.Millisecond), how)
				if how == "fatal" {
					wantEventErr(t, "a Dial in progress", err, "IBV_EVENT_DEVICE_FATAL", "")
				} else if !errors.Is(err, rdma.ErrClosed) {
					t.Fatalf("a Dial in progress at Close: %v, want ErrClosed", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("a Dial in progress still waits 5 s after the device's %s", how)
			}
			dev.mu.Lock()
			n := len(dev.dials)
			dev.mu.Unlock()
			if n != 0 {
				t.Fatalf("%d dials still tracked after the Dial returned", n)
			}
		})
	}
}

// TestAsyncReaderStops: the first Device opened on a context starts its
// event reader, which the last one closed stops (and waits for).
func TestAsyncReaderStops(t *testing.T) {
	vmIP(t)
	d1, err := rdma.OpenConfig("verbs", rdma.Config{})
	if err != nil {
		t.Fatal(err)
	}
	d2, err := rdma.OpenConfig("verbs", rdma.Config{})
	if err != nil {
		d1.Close()
		t.Fatal(err)
	}
	ctx := d1.(*device).ctx
	reader := func() *asyncReader {
		asyncs.mu.Lock()
		defer asyncs.mu.Unlock()
		return asyncs.readers[ctx]
	}
	r := reader()
	if r == nil || d2.(*device).ctx != ctx {
		t.Fatal("no event reader for the devices' context")
	}
	d1.Close()
	if reader() != r {
		t.Fatal("closing one of two devices on a context stopped its reader")
	}
	select {
	case <-r.done:
		t.Fatal("the reader ended with a device still open")
	default:
	}
	d2.Close()
	select {
	case <-r.done:
	default:
		t.Fatal("the reader runs after the last device closed")
	}
	if reader() != nil {
		t.Fatal("the context keeps a reader after its last device closed")
	}
}

// TestAsyncPortError: taking rxe0's netdev down raises
// IBV_EVENT_PORT_ERR. A flap, the link back up (IBV_EVENT_PORT_ACTIVE)
// within portGrace, fails nothing: a message sent after it over a
// connection made before it arrives. (rxe fails a send posted while its
// netdev is down at once, a fatal error completion, where a NIC's QP
// retransmits across the gap; so the test sends after the flap.) A port that
// stays down past portGrace fails every connection on it: a posted
// receive comes back flushed, then GetRecvComp returns an error naming
// the event and the grace, on both ends. Before, the event failed the
// connections at once, flap or not.
//
// After a flap rdma_cm in the VM connects no more (rxe, Linux 6.1: a
// dial times out; not this provider's doing, the next tests' fresh
// devices fail alike), so the test makes its connections first and runs
// only when -run names it, alone in its VM: scripts/rxe-vm/test.sh -run
// TestAsyncPortError.
func TestAsyncPortError(t *testing.T) {
	ip := vmIP(t)
	if f := flag.Lookup("test.run"); f == nil || !strings.Contains(f.Value.String(), t.Name()) {
		t.Skip("takes rxe0's link down, after which rdma_cm cannot connect in the VM: run it alone with -run " + t.Name())
	}
	ipTool, err := exec.LookPath("ip")
	if err != nil {
		t.Skip("no ip tool")
	}
	netdev := ""
	ifs, _ := net.Interfaces()
	for _, ifc := range ifs {
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.String() == ip {
				netdev = ifc.Name
			}
		}
	}
	if netdev == "" {
		t.Fatalf("no interface has %s", ip)
	}
	routes, _ := exec.Command(ipTool, "route", "show", "default").Output()
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(ipTool, args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	events := watchAsyncEvents(t)
	d := openDev(t, rdma.Config{})
	cli, srv := pair(t, d)
	rb, _ := d.Alloc(64, rdma.AccessLocalWrite)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	up := true
	linkDown := func() {
		up = false
		run("link", "set", netdev, "down")
		events.wait(t, ctx, eventPortErr, "IBV_EVENT_PORT_ERR")
	}
	restore := func() { // the link and its routes, if down
		if up {
			return
		}
		up = true
		run("link", "set", netdev, "up")
		for _, r := range strings.Split(strings.TrimSpace(string(routes)), "\n") {
			if r != "" {
				_ = exec.Command(ipTool, append([]string{"route", "replace"}, strings.Fields(r)...)...).Run()
			}
		}
	}
	linkUp := func() {
		restore()
		events.wait(t, ctx, eventPortActive, "IBV_EVENT_PORT_ACTIVE")
	}
	// The test ends with the link down: up again, without waiting for
	// the event (ctx has ended by then).
	t.Cleanup(restore)

	// A flap: down, and up again well within the grace.
	defer func(g time.Duration) { portGrace = g }(portGrace)
	portGrace = 10 * time.Second
	if err := srv.PostRecv(2, rb.Bytes(), rb); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	linkDown()
	time.Sleep(200 * time.Millisecond)
	linkUp()
	if err := cli.PostSend(20, []byte("flap"), nil, rdma.FlagInline|rdma.FlagSignaled); err != nil {
		t.Fatal("a send after the flap:", err)
	}
	t.Logf("the link was down for %v", time.Since(start).Round(time.Millisecond))
	wc, err := cli.GetSendComp(ctx)
	mustWC(t, wc, err, 20, rdma.OpSend)
	wc, err = srv.GetRecvComp(ctx)
	mustWC(t, wc, err, 2, rdma.OpRecv)
	if got := string(rb.Bytes()[:wc.ByteLen]); got != "flap" {
		t.Fatalf("received %q across the flap, want %q", got, "flap")
	}
	if err := cli.Err(); err != nil {
		t.Fatalf("the connection failed across the flap: %v", err)
	}
	t.Logf("a send posted after the flap completed %v after it began", time.Since(start).Round(time.Millisecond))

	// Down for good: the port's connections fail after the grace.
	portGrace = 500 * time.Millisecond
	if err := srv.PostRecv(3, rb.Bytes(), rb); err != nil {
		t.Fatal(err)
	}
	linkDown()
	down := time.Now()
	wcs, err := drainRecv(t, ctx, srv)
	t.Logf("the receiver's GetRecvComp failed %v after the event: %v", time.Since(down).Round(time.Millisecond), err)
	wantEventErr(t, "the receiver's GetRecvComp", err, "IBV_EVENT_PORT_ERR", "")
	if !strings.Contains(err.Error(), "stayed down for 500ms") {
		t.Errorf("the receiver's GetRecvComp: %v does not give the grace", err)
	}
	if since := time.Since(down); since < 400*time.Millisecond {
		t.Errorf("the connection failed %v after the port went down, before the grace (500ms)", since)
	}
	if len(wcs) != 1 || wcs[0].WRID != 3 || wcs[0].Status != rdma.StatusFlushed {
		t.Fatalf("receive completions %+v, want wrid 3 flushed", wcs)
	}
	_, err = cli.GetRecvComp(ctx)
	wantEventErr(t, "the sender's GetRecvComp", err, "IBV_EVENT_PORT_ERR", "")
	wantEventErr(t, "Err", cli.Err(), "IBV_EVENT_PORT_ERR", "")
}

// TestAsyncRemoteAccess looks for a QP event from a real fault: a write
// with a wrong rkey fails on the writer (IBV_WC_REM_ACCESS_ERR), and the
// IB spec lets the target raise IBV_EVENT_QP_ACCESS_ERR. It logs the
// events that came within a second; if the target's QP had one, its
// connection must have failed with it.
func TestAsyncRemoteAccess(t *testing.T) {
	events := watchAsyncEvents(t)
	d := openDev(t, rdma.Config{})
	cli, srv := pair(t, d)
	src, _ := d.Alloc(64, rdma.AccessLocalWrite)
	dst, _ := d.Alloc(64, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
	ctx := ctxT(t)
	if err := cli.PostWrite(1, src.Bytes(), src, rdma.FlagSignaled, dst.Addr(), dst.RKey()^0x5a5a); err != nil {
		t.Fatal(err)
	}
	wc, err := cli.GetSendComp(ctx)
	if err != nil || wc.Status != rdma.StatusRemoteAccessError {
		t.Fatalf("write with a wrong rkey: %+v %v, want a remote access error", wc, err)
	}
	timer := time.NewTimer(time.Second) // how long to look, not a synchronisation
	defer timer.Stop()
	var seen []int
	for done := false; !done; {
		select {
		case e := <-events:
			seen = append(seen, e[0])
		case <-timer.C:
			done = true
		}
	}
	t.Logf("events after a remote access error: %v (QP_ACCESS_ERR is %d, QP_FATAL %d)", seen, eventQPAccessErr, eventQPFatal)
	for _, e := range seen {
		if e == eventQPAccessErr || e == eventQPFatal {
			wantEventErr(t, "the target's Err", srv.Err(), "IBV_EVENT_QP_", "")
		}
	}
}
