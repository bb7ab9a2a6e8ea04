package launcher

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// netnsAgent is the launch agent of TestTwoHostsInNetworkNamespaces: it
// gets "HOST ARGV..." like ssh and runs ARGV inside the network namespace
// that GORUN_TEST_NETNS maps HOST to ("10.1.2.3=nsname").
func netnsAgent(args []string) int {
	if len(args) < 2 {
		fmt.Fprintln(os.Stderr, "netns agent: want HOST ARGV...")
		return 255
	}
	host, ns, ok := strings.Cut(os.Getenv("GORUN_TEST_NETNS"), "=")
	if !ok || host != args[0] {
		fmt.Fprintf(os.Stderr, "netns agent: unknown host %q\n", args[0])
		return 255
	}
	ip, err := exec.LookPath("ip")
	if err != nil {
		fmt.Fprintln(os.Stderr, "netns agent:", err)
		return 255
	}
	err = syscall.Exec(ip, append([]string{"ip", "netns", "exec", ns}, args[1:]...), os.Environ())
	fmt.Fprintln(os.Stderr, "netns agent:", err)
	return 255
}

// netnsRank is the rank program of the two-host test: every rank reaches
// the launcher's control address and rank 0's seed address from its own
// network namespace.
func netnsRank() int {
	rank := os.Getenv(EnvRank)
	netns, _ := os.Readlink("/proc/self/ns/net")
	if tok := os.Getenv(EnvJobToken); len(tok) != 64 {
		fmt.Printf("job token %q did not arrive through the agent's stdin\n", tok)
		return 1
	}
	if c, err := net.DialTimeout("tcp", os.Getenv(EnvControl), 5*time.Second); err != nil {
		fmt.Println("control unreachable:", err)
		return 1
	} else {
		c.Close()
	}
	seed := os.Getenv(EnvSeeds)
	if rank == "0" {
		ln, err := net.Listen("tcp", seed)
		if err != nil {
			fmt.Println("cannot listen on seed:", err)
			return 1
		}
		defer ln.Close()
		ln.(*net.TCPListener).SetDeadline(time.Now().Add(20 * time.Second))
		got := make([]string, 0, 3)
		for len(got) < 3 {
			c, err := ln.Accept()
			if err != nil {
				fmt.Println("accept:", err)
				return 1
			}
			line, _ := bufio.NewReader(c).ReadString('\n')
			got = append(got, strings.TrimSpace(line))
			c.Close()
		}
		fmt.Printf("netns=%s seed heard from %d ranks\n", netns, len(got))
		return 0
	}
	var c net.Conn
	var err error
	for try := 0; try < 100; try++ { // rank 0 may not listen yet
		if c, err = net.DialTimeout("tcp", seed, time.Second); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		fmt.Println("seed unreachable:", err)
		return 1
	}
	fmt.Fprintf(c, "%s\n", rank)
	c.Close()
	fmt.Printf("netns=%s reached seed\n", netns)
	return 0
}

// TestTwoHostsInNetworkNamespaces runs a job on two "hosts": this network
// namespace and a new one joined by a veth pair; the second host's ranks
// start through a launch agent, as ssh would start them.
func TestTwoHostsInNetworkNamespaces(t *testing.T) {
	id := os.Getpid() % 10000
	ns := fmt.Sprintf("gorun-t%d", id)
	vethA, vethB := fmt.Sprintf("gr%da", id), fmt.Sprintf("gr%db", id)
	ipA, ipB := fmt.Sprintf("10.231.%d.1", id%250), fmt.Sprintf("10.231.%d.2", id%250)
	run := func(args ...string) error {
		out, err := exec.Command("ip", args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	run("netns", "del", ns) // left over from a killed run, if any
	if err := run("netns", "add", ns); err != nil {
		t.Skipf("cannot create a network namespace (needs root and iproute2): %v", err)
	}
	t.Cleanup(func() {
		run("link", "del", vethA) // usually gone with the namespace
		if err := run("netns", "del", ns); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	for _, args := range [][]string{
		{"link", "add", vethA, "type", "veth", "peer", "name", vethB},
		{"link", "set", vethB, "netns", ns},
		{"addr", "add", ipA + "/24", "dev", vethA},
		{"link", "set", vethA, "up"},
		{"netns", "exec", ns, "ip", "addr", "add", ipB + "/24", "dev", vethB},
		{"netns", "exec", ns, "ip", "link", "set", vethB, "up"},
		{"netns", "exec", ns, "ip", "link", "set", "lo", "up"},
	} {
		if err := run(args...); err != nil {
			t.Skipf("cannot set up the veth pair: %v", err)
		}
	}
	t.Setenv("GORUN_TEST_ROLE", "netns-agent") // what the agent (this binary) does
	t.Setenv("GORUN_TEST_NETNS", ipB+"="+ns)
	out, stderr, err := runJob(t, "netns", Config{
		NP:          4,
		Hosts:       []Host{{Name: ipA, Slots: 2}, {Name: ipB, Slots: 2}},
		LaunchAgent: []string{testBinary(t)},
	})
	if err != nil {
		t.Fatalf("Run: %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr)
	}
	lines := rankLines(t, out)
	here, _ := os.Readlink("/proc/self/ns/net")
	for r := 0; r < 4; r++ {
		if len(lines[r]) != 1 {
			t.Fatalf("rank %d printed %q\n%s", r, lines[r], stderr)
		}
		inHere := strings.Contains(lines[r][0], "netns="+here+" ")
		if inHere != (r < 2) {
			t.Errorf("rank %d ran in the wrong namespace: %q (launcher's is %s)", r, lines[r][0], here)
		}
	}
	if !strings.HasSuffix(lines[0][0], "seed heard from 3 ranks") {
		t.Errorf("rank 0: %q", lines[0][0])
	}
}
