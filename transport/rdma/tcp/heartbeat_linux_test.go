package tcp

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// inNetns runs fn on a thread moved into network namespace ns (sockets
// keep the namespace they were created in).
func inNetns(t *testing.T, ns string, fn func()) {
	t.Helper()
	runtime.LockOSThread()
	self, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	defer self.Close()
	target, err := os.Open("/var/run/netns/" + ns)
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	fn()
	if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
		t.Fatal(err) // the thread stays locked and dies with the goroutine
	}
	runtime.UnlockOSThread()
}

func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// A link that goes dark (the veth between two network namespaces set down:
// every packet dropped, no RST, no FIN) fails an idle connection on both
// ends with errSilent: the heartbeat pings the idle link and nothing comes
// back from the peer's kernel. Without the heartbeat only keepalive
// (≥ 1 s idle, then its probes) could end it. Needs root and
// iproute2; skipped otherwise.
func TestHeartbeatFindsSilentLink(t *testing.T) {
	id := os.Getpid() % 100000
	ns := [2]string{fmt.Sprintf("grhb%da", id), fmt.Sprintf("grhb%db", id)}
	veth := [2]string{fmt.Sprintf("ghb%da", id), fmt.Sprintf("ghb%db", id)}
	ip := [2]string{fmt.Sprintf("10.233.%d.1", id%250), fmt.Sprintf("10.233.%d.2", id%250)}
	for _, n := range ns {
		if err := ipCmd("netns", "add", n); err != nil {
			t.Skipf("cannot create a network namespace (needs root and iproute2): %v", err)
		}
		t.Cleanup(func() { ipCmd("netns", "del", n) })
	}
	for _, args := range [][]string{
		{"link", "add", veth[0], "netns", ns[0], "type", "veth", "peer", "name", veth[1], "netns", ns[1]},
		{"-n", ns[0], "addr", "add", ip[0] + "/24", "dev", veth[0]},
		{"-n", ns[1], "addr", "add", ip[1] + "/24", "dev", veth[1]},
		{"-n", ns[0], "link", "set", veth[0], "up"},
		{"-n", ns[1], "link", "set", veth[1], "up"},
	} {
		if err := ipCmd(args...); err != nil {
			t.Skipf("cannot set up the veth pair: %v", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	devA, _ := rdma.Open("tcp")
	devB, _ := rdma.Open("tcp")
	defer devA.Close()
	defer devB.Close()
	var ln rdma.Listener
	var err error
	inNetns(t, ns[1], func() { ln, err = devB.Listen(ctx, ip[1]+":0") })
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan rdma.Conn, 1)
	go func() {
		c, _ := ln.Accept(ctx)
		accepted <- c
	}()
	var a rdma.Conn
	inNetns(t, ns[0], func() { a, err = devA.Dial(ctx, ln.Addr().String()) })
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b := <-accepted
	if b == nil {
		t.Fatal("accept failed")
	}
	defer b.Close()
	// Idle but up: the pings keep it so.
	time.Sleep(3 * heartbeatSilent)
	if a.Err() != nil || b.Err() != nil {
		t.Fatalf("an idle, healthy link failed: %v / %v", a.Err(), b.Err())
	}
	if err := ipCmd("-n", ns[0], "link", "set", veth[0], "down"); err != nil {
		t.Fatal(err)
	}
	cut := time.Now()
	for _, c := range []rdma.Conn{a, b} {
		_, err := c.GetRecvComp(ctx)
		if ctx.Err() != nil {
			t.Fatalf("no error within the test's deadline after the link went dark")
		}
		if !errors.Is(err, rdma.ErrClosed) || !errors.Is(c.Err(), errSilent) {
			t.Fatalf("GetRecvComp: %v; Err: %v; want a silent peer", err, c.Err())
		}
		t.Logf("failed %v after the cut: %v", time.Since(cut).Round(time.Millisecond), c.Err())
	}
}
