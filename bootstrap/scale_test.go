package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestGossipScale forms worlds of the sizes in GORUN_GOSSIP_SCALE (comma
// separated, e.g. 64,256,1000) in this process, then closes one member and
// shrinks, and prints the time to an agreed world and the traffic per
// member. GORUN_GOSSIP_NET says over what: "mem" (the default) an
// in-process MemNetwork, "udp" memberlist's real UDP and TCP on 127.0.0.1.
// It is a measurement, not a timed test: it fails only if a world does not
// form or the views differ, and is skipped without the variable.
//
//	GORUN_GOSSIP_SCALE=64,256,1000 go test -run GossipScale -v -timeout 30m ./bootstrap/
func TestGossipScale(t *testing.T) {
	env := os.Getenv("GORUN_GOSSIP_SCALE")
	if env == "" {
		t.Skip("set GORUN_GOSSIP_SCALE=64,256,1000 to measure gossip formation at scale")
	}
	// One process holds the heaps of n nodes (a job's ranks have one
	// each), and at the default GOGC the collector's assists stalled every
	// node at once for seconds, which starved nodes read as failures.
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	var sizes []int
	for _, f := range strings.Split(env, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 2 {
			t.Fatalf("GORUN_GOSSIP_SCALE: bad size %q", f)
		}
		sizes = append(sizes, n)
	}
	var nw func() *MemNetwork
	switch v := os.Getenv("GORUN_GOSSIP_NET"); v {
	case "", "mem":
		nw = NewMemNetwork
	case "udp":
		nw = func() *MemNetwork { return nil }
	default:
		t.Fatalf("GORUN_GOSSIP_NET: %q is neither mem nor udp", v)
	}
	t.Logf("%6s %8s %8s %8s | %9s %9s | %9s %9s | %9s %9s | %8s %9s %9s %8s | %8s %8s",
		"ranks", "form s", "cpu s", "load", "msg/mbr", "KiB/mbr", "seed msg", "seed KiB", "max msg", "max KiB",
		"shrink s", "msg/mbr", "seed msg", "lost %", "views s", "cpu s")
	t.Logf("(views: from formed until every survivor's memberlist holds all survivors, and the CPU from start until then)")
	t.Logf("(lost: percent of packets sent until formed / until shrunk)")
	for _, size := range sizes {
		load0 := loadAvg()
		r := measureFormation(t, fmt.Sprintf("scale-%d", size), size, nw())
		t.Logf("%6d %8.2f %8.1f %8s | %9.0f %9.1f | %9d %9.1f | %9d %9.1f | %8.2f %9.0f %9d %4.1f/%4.1f | %8.2f %8.1f",
			size, r.form.Seconds(), r.cpu.Seconds(), load0, r.mean.msgs, r.mean.bytes/1024, r.seed.Messages(),
			float64(r.seed.Bytes())/1024, r.max.Messages(), float64(r.max.Bytes())/1024,
			r.shrink.Seconds(), r.shrinkMean, r.shrinkSeed.Messages(), r.formLost, r.lost, r.views.Seconds(), r.viewsCPU.Seconds())
	}
}

type scaleResult struct {
	form, shrink time.Duration
	shrinkCPU    time.Duration
	cpu          time.Duration // user+system CPU of this process while the world formed
	mean         struct{ msgs, bytes float64 }
	seed, max    Traffic // at formation; max over the non-seed members, by messages
	shrinkMean   float64 // messages per survivor during shrink
	shrinkSeed   Traffic
	views        time.Duration // from formed until every survivor's memberlist holds every survivor
	viewsCPU     time.Duration
	formLost     float64 // percent of the packets sent until formed that were lost (MemNetwork only)
	lost         float64 // percent of the packets sent until shrunk that were lost (MemNetwork only)
}

// measureFormation forms a world of size members over nw (nil: UDP and
// TCP on loopback) and shrinks it by one.
func measureFormation(t *testing.T, job string, size int, nw *MemNetwork) scaleResult {
	var r scaleResult
	cfgs := make([]Config, size)
	for i := range cfgs {
		cfgs[i] = testConfig(job, i, size)
		cfgs[i].Timeout = 10 * time.Minute
		cfgs[i].CountTraffic = true
		cfgs[i].Network = nw
		// All ranks share this host's CPUs: relax probes as comm.Init
		// does on an oversubscribed host (relaxProbes: by ranks per CPU
		// / 2, at most 8×), or starved nodes are declared dead.
		if f := relaxFor(size); f > 1 {
			cfgs[i].ProbeInterval *= time.Duration(f)
			cfgs[i].ProbeTimeout *= time.Duration(f)
			cfgs[i].GossipInterval *= time.Duration(f)
		}
		if nw != nil {
			// One host, as comm's jobs on one host: the kernel (here the
			// network: a closed node leaves it) says which members run,
			// and gossip does not report a starved one dead (comm's
			// runningHere).
			cfgs[i].Running = func(m Member) bool { return nw.lookup(m.Addr) != nil }
		}
		if scaleLog != nil {
			cfgs[i].Logger = scaleLog
		}
	}
	stopProf := func() {}
	if p := os.Getenv("GORUN_GOSSIP_FORMPROF"); p != "" {
		// A CPU profile of the formation alone, until the coordinator
		// commits (-test.cpuprofile covers the whole run).
		if f, err := os.Create(p); err == nil {
			if pprof.StartCPUProfile(f) == nil {
				defer f.Close()
				stopProf = pprof.StopCPUProfile
			}
		}
	}
	start, cpu0 := time.Now(), cpuTime()
	seed, err := Start(cfgs[0], []byte("blob 0"))
	if err != nil {
		t.Fatalf("start seed: %v", err)
	}
	nodes := make([]*Node, size)
	started := make([]atomic.Pointer[Node], size) // for the timeline, before Form returns
	started[0].Store(seed)
	errs := make([]error, size)
	at := make([]Traffic, size)             // each node's traffic when its Form returned
	returned := make([]time.Duration, size) // when each node's Form returned
	var wg sync.WaitGroup
	var committed, commitCPU time.Duration // when the coordinator committed: every member locked on the world
	ctx := context.Background()
	stopTimeline := agreeTimeline(t, start, cpu0, 1, started)
	for i := range size {
		wg.Go(func() {
			if i == 0 {
				nodes[0] = seed
				_, errs[0] = seed.Form(ctx)
				committed, commitCPU = time.Since(start), cpuTime()-cpu0
				stopProf()
			} else {
				cfgs[i].Seeds = []string{seed.Addr()}
				var n *Node
				if n, errs[i] = Start(cfgs[i], fmt.Appendf(nil, "tcp 127.0.0.1:%d", 40000+i)); errs[i] == nil {
					started[i].Store(n)
					if _, errs[i] = n.Form(ctx); errs[i] != nil {
						n.shutdown(false)
					} else {
						nodes[i] = n
					}
				}
			}
			returned[i] = time.Since(start)
			if errs[i] == nil {
				at[i] = nodes[i].Traffic()
			}
		})
	}
	wg.Wait()
	r.form, r.cpu = time.Since(start), cpuTime()-cpu0
	formed := time.Now()
	stopTimeline()
	slices.Sort(returned)
	t.Logf("%d: members' Form returned after (s): median %.2f, 90%% %.2f, 99%% %.2f, last %.2f",
		size, returned[size/2].Seconds(), returned[size*9/10].Seconds(), returned[size*99/100].Seconds(), returned[size-1].Seconds())
	t.Logf("%d: agreed (coordinator committed) in %.2f s, %.1f CPU s; every member returned in %.2f s, %.1f CPU s",
		size, committed.Seconds(), commitCPU.Seconds(), r.form.Seconds(), r.cpu.Seconds())
	defer closeAll(nodes)
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("world of %d: %v", size, err)
	}
	w0 := nodes[0].World()
	for _, n := range nodes {
		if w := n.World(); w.Digest != w0.Digest || w.Size != size {
			t.Fatalf("node %s: world of %d differs", n.Name(), w.Size)
		}
	}
	var sum Traffic
	for i, tr := range at {
		sum = sum.Add(tr)
		if i > 0 && tr.Messages() > r.max.Messages() {
			r.max = tr
		}
	}
	r.seed = at[0]
	if sum.PacketsSent > 0 {
		r.formLost = 100 * float64(sum.PacketsLost) / float64(sum.PacketsSent)
	}
	r.mean.msgs = float64(sum.Messages()) / float64(size)
	r.mean.bytes = float64(sum.Bytes()) / float64(size)
	t.Logf("%d formed: per member %.0f messages, %.1f KiB (most %d, %.1f KiB); the seed %d messages, %.1f KiB; %.1f%% of packets lost",
		size, r.mean.msgs, r.mean.bytes/1024, r.max.Messages(), float64(r.max.Bytes())/1024,
		r.seed.Messages(), float64(r.seed.Bytes())/1024, r.formLost)

	if viewsFirst {
		complete, least := waitViews(ctx, t, nodes, size)
		heapProfile()
		r.views, r.viewsCPU = time.Since(formed), cpuTime()-cpu0
		t.Logf("%d views: %d of %d members hold every member %.2f s after formation (%.1f CPU s since start; the least holds %d; load %s)",
			size, complete, size, r.views.Seconds(), r.viewsCPU.Seconds(), least, loadAvg())
	}

	// Shrink: the last rank closes; the others agree on the next world.
	last := nodes[size-1]
	survivors := slices.Clone(nodes[:size-1])
	before := make([]Traffic, len(survivors))
	for i, n := range survivors {
		before[i] = n.Traffic()
	}
	for i := range started {
		started[i].Store(nil)
	}
	for i, n := range survivors {
		started[i].Store(n)
	}
	start, cpu1 := time.Now(), cpuTime()
	stopTimeline = agreeTimeline(t, start, cpu1, 2, started)
	last.Close()
	sctx, cancel := context.WithTimeout(ctx, shrinkTimeout)
	defer cancel()
	for i, n := range survivors {
		wg.Go(func() {
			var w World
			if w, errs[i] = n.Shrink(sctx); errs[i] == nil && (w.Size != size-1 || w.Epoch != 2) {
				errs[i] = fmt.Errorf("node %s: shrunk world of %d, epoch %d", n.Name(), w.Size, w.Epoch)
			}
		})
	}
	wg.Wait()
	stopTimeline()
	r.shrink, r.shrinkCPU = time.Since(start), cpuTime()-cpu1
	failed := slices.IndexFunc(errs[:size-1], func(err error) bool { return err != nil })
	t.Logf("%d shrunk in %.2f s, %.1f CPU s (load %s)", size, r.shrink.Seconds(), r.shrinkCPU.Seconds(), loadAvg())
	if failed >= 0 {
		k := len(slices.DeleteFunc(slices.Clone(errs[:size-1]), func(err error) bool { return err == nil }))
		t.Errorf("shrink of %d: %d survivors failed, the first: %.2000v", size, k, errs[failed])
	}
	var msgs uint64
	for i, n := range survivors {
		d := n.Traffic()
		msgs += d.Messages() - before[i].Messages()
		if i == 0 {
			r.shrinkSeed = Traffic{PacketsSent: d.PacketsSent - before[0].PacketsSent, PacketsRecv: d.PacketsRecv - before[0].PacketsRecv,
				StreamsOpened: d.StreamsOpened - before[0].StreamsOpened, StreamsAccepted: d.StreamsAccepted - before[0].StreamsAccepted}
		}
	}
	r.shrinkMean = float64(msgs) / float64(len(survivors))
	t.Logf("%d shrink: per survivor %.0f messages; the seed %d", size, r.shrinkMean, r.shrinkSeed.Messages())
	if !viewsFirst {
		complete, least := waitViews(ctx, t, survivors, size-1)
		heapProfile()
		r.views, r.viewsCPU = time.Since(formed), cpuTime()-cpu0
		t.Logf("%d views: %d of %d survivors hold every survivor %.2f s after formation (%.1f CPU s since start; the least holds %d; load %s)",
			size, complete, len(survivors), r.views.Seconds(), r.viewsCPU.Seconds(), least, loadAvg())
	}
	var all Traffic
	for _, n := range survivors {
		all = all.Add(n.Traffic())
	}
	if all.PacketsSent > 0 {
		r.lost = 100 * float64(all.PacketsLost) / float64(all.PacketsSent)
	}
	return r
}

// cpuTime is the user and system CPU time this process used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// rss is this process's resident memory, for the record.
func rss() string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "RSS ?"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			return "RSS " + strings.TrimSpace(v)
		}
	}
	return "RSS ?"
}

// loadAvg is the 1-minute load average, for the record.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	return f[0]
}

// waitViews waits until every node's view holds want members, or
// viewsTimeout, and says how many do and the fewest one holds. Failure
// detection needs every member in every memberlist; a world formed by
// hello (hello.go) is agreed before that. It polls, as a measurement:
// nothing in bootstrap waits on it.
func waitViews(ctx context.Context, t *testing.T, nodes []*Node, want int) (complete, least int) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	ctx, cancel := context.WithTimeout(ctx, viewsTimeout)
	defer cancel()
	start, cpu0, logged := time.Now(), cpuTime(), time.Now()
	for {
		complete, least = 0, want
		var tr Traffic
		for _, n := range nodes {
			n.viewMu.Lock()
			k := len(n.peers) // the delegate's view: memberlist's NumMembers waits behind its node lock
			n.viewMu.Unlock()
			if k >= want {
				complete++
			}
			least = min(least, k)
			tr = tr.Add(n.Traffic())
		}
		if complete == len(nodes) {
			return complete, least
		}
		if time.Since(logged) >= 5*time.Second {
			logged = time.Now()
			t.Logf("  %5.1f s %5.1f cpu s: %d of %d views complete, the least %d; packets sent %d, lost %d; %s (load %s)",
				time.Since(start).Seconds(), (cpuTime() - cpu0).Seconds(), complete, len(nodes), least,
				tr.PacketsSent, tr.PacketsLost, rss(), loadAvg())
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return complete, least
		}
	}
}

// heapProfile writes the heap's profile to GORUN_GOSSIP_HEAPPROF, if set:
// once the views filled, or at viewsTimeout.
func heapProfile() {
	if p := os.Getenv("GORUN_GOSSIP_HEAPPROF"); p != "" {
		if f, err := os.Create(p); err == nil {
			_ = pprof.Lookup("heap").WriteTo(f, 0)
			f.Close()
		}
	}
}

// relaxFor is how much the measurement relaxes probes and gossip for
// size members on this machine's CPUs: as comm.Init does (by members per
// CPU / 2, at most 8×), or GORUN_GOSSIP_RELAX's factor, to see whether a
// formation's views fill once the nodes are not starved.
func relaxFor(size int) int {
	if f, err := strconv.Atoi(os.Getenv("GORUN_GOSSIP_RELAX")); err == nil && f > 0 {
		return f
	}
	return min(size/runtime.NumCPU()/2, 8)
}

// viewsFirst (GORUN_GOSSIP_SHRINK=views) shrinks once the views are
// complete, in a world whose gossip has settled, rather than right after
// formation while the views still fill.
var viewsFirst = os.Getenv("GORUN_GOSSIP_SHRINK") == "views"

// shrinkTimeout and viewsTimeout bound a measurement's shrink, and its
// wait for complete views after formation.
const (
	shrinkTimeout = 3 * time.Minute
	viewsTimeout  = 3 * time.Minute
)

var scaleLog = func() *log.Logger {
	if p := os.Getenv("GORUN_GOSSIP_LOG"); p != "" {
		f, err := os.Create(p)
		if err == nil {
			return log.New(f, "", log.Lmicroseconds)
		}
	}
	return nil
}()

// GORUN_MEMQ sets the MemNetwork's receive queue (memQueue) for a
// measurement: 4096 against 256 showed whether drops caused a failure.
func init() {
	if v, err := strconv.Atoi(os.Getenv("GORUN_MEMQ")); err == nil {
		memQueue = v
	}
}

// agreeTimeline logs, every half second until stopped, how far the
// agreement on epoch got: the members the coordinator (node 0) heard of
// (epoch 1: hellos and joins in its view; later: proposals), those that
// got a prepare, locked, acked at the coordinator, and installed the
// world, and the packets sent and lost so far. It reads the nodes' state
// as the agreement loop does.
func agreeTimeline(t *testing.T, start time.Time, cpu0 time.Duration, epoch uint32, nodes []atomic.Pointer[Node]) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			var heard, acked, prepared, locked, installed int
			var lost, sent uint64
			for i := range nodes {
				n := nodes[i].Load()
				if n == nil {
					continue
				}
				n.mu.Lock()
				_, p := n.prepares[epoch]
				_, l := n.locked[epoch]
				if i == 0 {
					heard, acked = len(n.proposals[epoch]), len(n.acks[epoch])
				}
				f := n.formed && n.world.Epoch >= epoch
				n.mu.Unlock()
				if i == 0 && epoch == 1 {
					n.viewMu.Lock()
					heard = len(n.peers)
					n.viewMu.Unlock()
				}
				tr := n.Traffic()
				lost, sent = lost+tr.PacketsLost, sent+tr.PacketsSent
				prepared, locked, installed = prepared+b2i(p), locked+b2i(l), installed+b2i(f)
			}
			t.Logf("  %5.1f s %5.1f cpu s: heard %4d prepared %4d locked %4d acked %4d installed %4d; packets sent %d, lost %d; %s (load %s)",
				time.Since(start).Seconds(), (cpuTime() - cpu0).Seconds(), heard, prepared, locked, acked, installed, sent, lost, rss(), loadAvg())
		}
	})
	return func() { close(done); wg.Wait() }
}
