package comm

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/launcher"
	"github.com/gorun-hpc/gorun/scripts/cluster"
)

const saturateChildEnv = "GORUN_SATURATE_TEST_CHILD"

// TestSaturatedChild is a rank of TestClusterSaturatedLink: it keeps its
// host's link full with allreduces for the given time, then checks one
// more allreduce; a rank that gossip wrongly declared dead fails them.
func TestSaturatedChild(t *testing.T) {
	d, err := time.ParseDuration(os.Getenv(saturateChildEnv))
	if err != nil {
		t.Skip("run by TestClusterSaturatedLink")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := Init(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := make([]float32, 1<<20) // 4 MiB
	n := 0
	// The ranks agree on when to stop: each started its clock when its
	// Init returned, and a rank that left the loop one allreduce before
	// the other met it with the last allreduce below (CI, 2026-11-29:
	// "ranks disagree on the collective call", float32 against int64).
	stop := []int32{0}
	for start := time.Now(); stop[0] == 0; n++ {
		if err := AllReduce(ctx, c, buf, buf, Sum); err != nil {
			t.Fatalf("allreduce %d: %v", n, err)
		}
		if time.Since(start) >= d {
			stop[0] = 1
		}
		if err := AllReduce(ctx, c, stop, stop, Max); err != nil {
			t.Fatalf("stop vote %d: %v", n, err)
		}
	}
	one := []int64{1}
	if err := AllReduce(ctx, c, one, one, Sum); err != nil || one[0] != int64(c.Size()) {
		t.Fatalf("last allreduce: %v %v", one, err)
	}
	fmt.Printf("allreduces=%d\n", n)
}

// TestClusterSaturatedLink: two hosts' links kept full by the job's own
// traffic for several seconds, with a queue of half a second (a deep switch or NIC
// buffer), must not make gossip declare a live rank dead. memberlist's
// probes are small packets, which the cluster's links, like a
// datacentre's, send ahead of bulk data (scripts/cluster: shape). With
// GORUN_SATURATE_NOPRIO=1 the links have one queue for everything; that
// passed too (100mbit/500ms, and GORUN_SATURATE_RATE=20mbit
// GORUN_SATURATE_QUEUE=3s, at load 19-23): a probe answered late is
// refuted, and memberlist's TCP fallback probe gets through.
func TestClusterSaturatedLink(t *testing.T) {
	if testing.Short() {
		t.Skip("short: saturates shaped links for 5 s")
	}
	t.Parallel()
	o := cluster.Options{Hosts: 2, Rate: "100mbit", Queue: "500ms", NoPriority: os.Getenv("GORUN_SATURATE_NOPRIO") == "1"}
	if r, q := os.Getenv("GORUN_SATURATE_RATE"), os.Getenv("GORUN_SATURATE_QUEUE"); r != "" && q != "" {
		o.Rate, o.Queue = r, q
	}
	cl := cluster.Start(t, o)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var hosts []launcher.Host
	for _, h := range cl.Names() {
		hosts = append(hosts, launcher.Host{Name: h, Slots: 1})
	}
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err = launcher.Run(ctx, launcher.Config{NP: len(hosts), Hosts: hosts, Program: exe,
		Args:   []string{"-test.run=^TestSaturatedChild$", "-test.v"},
		Export: []string{saturateChildEnv + "=5s"}, UseSrun: "no", Stdout: &out, Stderr: &errb})
	if err != nil {
		t.Fatalf("%v\n%s%s", err, out.String(), errb.String())
	}
	if got := strings.Count(out.String(), "--- PASS: TestSaturatedChild"); got != len(hosts) {
		t.Fatalf("%d of %d ranks passed:\n%s%s", got, len(hosts), out.String(), errb.String())
	}
	// The links were full: the bulk queue dropped or held packets.
	q, err := exec.Command("ip", "netns", "exec", cl.Hosts[0].Netns, "tc", "-s", "qdisc", "show", "dev", "eth0").CombinedOutput()
	if err != nil {
		t.Fatalf("tc: %v: %s", err, q)
	}
	if !saturated(string(q)) {
		t.Errorf("host 1's link never queued data; the test did not saturate it:\n%s", q)
	}
	t.Logf("%s\n%s", strings.TrimSpace(out.String()), q)
}

// saturated reports whether tc -s shows a queue that overflowed or
// delayed packets (drops or overlimits on the shaping qdisc).
func saturated(tcStats string) bool {
	for _, m := range regexp.MustCompile(`dropped (\d+), overlimits (\d+)`).FindAllStringSubmatch(tcStats, -1) {
		d, _ := strconv.Atoi(m[1])
		o, _ := strconv.Atoi(m[2])
		if d > 0 || o > 0 {
			return true
		}
	}
	return false
}
