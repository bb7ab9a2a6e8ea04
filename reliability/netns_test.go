package reliability

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/comm"
)

// netnsPair is two network namespaces ("hosts") joined by a veth pair.
type netnsPair struct {
	ns, veth, ip [2]string
}

func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// newNetnsPair creates the namespaces, or skips the test saying why; they
// are deleted when the test ends.
func newNetnsPair(t *testing.T) *netnsPair {
	id := os.Getpid()%10000 + rand.IntN(1000)*10000
	p := &netnsPair{}
	for i := range 2 {
		p.ns[i] = fmt.Sprintf("grrel%d%c", id, 'a'+i)
		p.veth[i] = fmt.Sprintf("gv%d%c", id%100000, 'a'+i)
		p.ip[i] = fmt.Sprintf("10.232.%d.%d", id%250, i+1)
	}
	for i := range 2 {
		if err := ipCmd("netns", "add", p.ns[i]); err != nil {
			t.Skipf("cannot create a network namespace (needs root and iproute2): %v", err)
		}
		ns := p.ns[i]
		t.Cleanup(func() {
			if err := ipCmd("netns", "del", ns); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		})
	}
	for _, args := range [][]string{
		{"link", "add", p.veth[0], "netns", p.ns[0], "type", "veth", "peer", "name", p.veth[1], "netns", p.ns[1]},
		{"-n", p.ns[0], "addr", "add", p.ip[0] + "/24", "dev", p.veth[0]},
		{"-n", p.ns[1], "addr", "add", p.ip[1] + "/24", "dev", p.veth[1]},
		{"-n", p.ns[0], "link", "set", p.veth[0], "up"},
		{"-n", p.ns[1], "link", "set", p.veth[1], "up"},
		{"-n", p.ns[0], "link", "set", "lo", "up"},
		{"-n", p.ns[1], "link", "set", "lo", "up"},
	} {
		if err := ipCmd(args...); err != nil {
			t.Skipf("cannot set up the veth pair: %v", err)
		}
	}
	return p
}

// host returns a jobSpec.wrap that runs rank r on host of(r): in its
// network namespace, and in a UTS namespace of its own named after it, so
// that gorun takes the two for different hosts (jobenv.HostIdentity; a
// rank's process found running on its own host is not dead, comm's
// runningHere).
func (p *netnsPair) host(of func(r int) int) func(r int) []string {
	return func(r int) []string {
		return []string{"ip", "netns", "exec", p.ns[of(r)], "unshare", "--uts", "--",
			"sh", "-c", `echo "$0" > /proc/sys/kernel/hostname && exec "$@"`, p.ns[of(r)]}
	}
}

// netem applies a netem qdisc to host i's end of the link.
func (p *netnsPair) netem(i int, args ...string) error {
	a := append([]string{"netns", "exec", p.ns[i], "tc", "qdisc", "replace", "dev", p.veth[i], "root", "netem"}, args...)
	out, err := exec.Command("ip", a...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("tc %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// TestPartitionBetweenHosts runs 4 ranks on two "hosts" (ranks 0-1 and
// 2-3) over tcp: first through a lossy, slow, corrupting link (tc netem
// delay 2ms, loss 2%, corrupt 1%: TCP's own checksum and retransmission
// must keep every result right), then with the link down. Both sides must
// fail within the timeout, each naming a rank on the other side. Each
// "host" has a hostname of its own (p.host); without one (before
// 2026-11-29), gorun took the two namespaces for one host.
func TestPartitionBetweenHosts(t *testing.T) {
	p := newNetnsPair(t)
	netem := p.netem(0, "delay", "2ms", "loss", "2%", "corrupt", "1%") == nil && p.netem(1, "delay", "2ms", "loss", "2%", "corrupt", "1%") == nil
	if !netem {
		t.Log("tc netem unavailable (sch_netem?): the lossy phase runs on a clean link")
	}
	const timeout = 5 * time.Second
	host := func(r int) int { return r / 2 }
	j := startJob(t, jobSpec{n: 4, role: "coll", transport: "tcp", timeout: timeout, seedHost: p.ip[0], seedPort: 20000 + rand.IntN(20000),
		env:     []string{"REL_OP=allreduce", "REL_COUNT=4096", "REL_REINIT=0"},
		rankEnv: map[int][]string{0: {"GORUN_SOCKET_IFNAME=" + p.veth[0]}, 1: {"GORUN_SOCKET_IFNAME=" + p.veth[0]}, 2: {"GORUN_SOCKET_IFNAME=" + p.veth[1]}, 3: {"GORUN_SOCKET_IFNAME=" + p.veth[1]}},
		wrap:    p.host(host)})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	j.waitReady(ctx)
	time.Sleep(3 * time.Second) // allreduce after allreduce over the lossy link
	for _, rk := range j.ranks {
		if e, ok := rk.event("wrong"); ok {
			t.Fatalf("rank %d: WRONG RESULT over the lossy link: %s", rk.id, e.Err)
		}
		if e, ok := rk.event("error"); ok {
			t.Fatalf("rank %d failed over the lossy link: %s\n%s", rk.id, e.Err, j.logs())
		}
	}
	cut := time.Now()
	if err := ipCmd("-n", p.ns[0], "link", "set", p.veth[0], "down"); err != nil {
		t.Fatal(err)
	}
	var ds []time.Duration
	for _, rk := range j.ranks {
		e, ok := rk.waitEvent(ctx, "error")
		if !ok {
			t.Errorf("rank %d: no error after the partition (hang)\n%s", rk.id, rk.log())
			continue
		}
		d := time.Unix(0, e.T).Sub(cut)
		ds = append(ds, d)
		if d > timeout+2*time.Second {
			t.Errorf("rank %d: error %v after the partition, timeout %v", rk.id, d, timeout)
		}
		if e.ErrRank < 0 || host(e.ErrRank) == host(rk.id) {
			t.Errorf("rank %d (host %d) names rank %d, not one across the partition: %s", rk.id, host(rk.id), e.ErrRank, e.Err)
		} else {
			t.Logf("rank %d (host %d) after %v: %s", rk.id, host(rk.id), d.Round(time.Millisecond), e.Err)
		}
	}
	report(t, "partition", map[string][]time.Duration{"tcp netns": ds})
	var hangs []string
	for _, rk := range j.ranks {
		if _, _, ok := rk.exit(20 * time.Second); !ok {
			t.Errorf("rank %d did not exit after its error", rk.id)
		}
		if h, ok := rk.event("closehang"); ok {
			hangs = append(hangs, fmt.Sprintf("rank %d: %s", rk.id, h.Err))
		}
	}
	closeHangs(t, hangs)
}

// TestGrowAcrossHosts is TestGrowAfterRestart on two "hosts": ranks 0-1 in
// one network namespace, 2-3 in the other, over tcp. A job that spans
// hosts with more than one rank on some host splits off the hierarchical
// algorithms' communicators in Init, and again after each Shrink and Grow
// (comm's remakeHier). Before 2026-11-29 the restarted rank's Init split
// them off while the members' Grow did not, and its Split's allgather met
// the members' membership check (an allreduce): "ranks disagree on the
// collective call".
//
// After the shrink (ranks 0-1 and 2: still across hosts) and after the
// grow (2x2), every rank runs an allreduce and a broadcast of 128 KiB,
// above the hierarchical threshold, checked (REL_GROW_LARGE); its
// GORUN_DEBUG=info log must say they ran hierarchically on the
// communicator of 3 and on that of 4 (before c8af7ab, Shrink and Grow
// made communicators with the flat algorithms alone). Every rank must end
// with nothing leaked.
func TestGrowAcrossHosts(t *testing.T) {
	p := newNetnsPair(t)
	host := func(r int) int { return r / 2 }
	rankEnv := map[int][]string{}
	for r := range 4 {
		rankEnv[r] = []string{"GORUN_SOCKET_IFNAME=" + p.veth[host(r)]}
	}
	const victim = 3
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	j := growSpecAfterKill(ctx, t, jobSpec{n: 4, role: "grow", transport: "tcp", timeout: 20 * time.Second,
		env: []string{"REL_REINIT=0", "REL_GROW_SHARE=1", "REL_GROW_LARGE=1", "GORUN_DEBUG=info"}, rankEnv: rankEnv,
		seedHost: p.ip[0], seedPort: 20000 + rand.IntN(20000), wrap: p.host(host)}, victim)
	restartGrown(ctx, t, j, victim)
	for _, rk := range j.ranks {
		steps := []struct {
			after string
			size  int
		}{{"shrink", 3}, {"grow", 4}}
		if rk.id == victim {
			steps = steps[1:] // restarted: joined the grown world
		}
		log := rk.log()
		for _, st := range steps {
			if e, ok := rk.event("large-" + st.after); !ok || e.Iter != st.size {
				t.Errorf("rank %d: no checked large collectives on the communicator of %d after the %s (%+v)", rk.id, st.size, st.after, e)
			}
			for _, coll := range []string{"allreduce", "broadcast"} {
				line := fmt.Sprintf("gorun rank %d: %s of %d bytes runs hierarchically (rank %d of %d on 2 hosts", rk.id, coll, largeElems*8, rk.id, st.size)
				if !strings.Contains(log, line) {
					t.Errorf("rank %d: after the %s, no line %q in its log:\n%s", rk.id, st.after, line, log)
				}
			}
		}
		if a, _ := rk.event("after"); a.Leak != "" {
			t.Errorf("rank %d: leaked after Close: %s", rk.id, a.Leak)
		}
		for _, l := range strings.Split(log, "\n") { // how long the Splits took
			if _, rest, ok := strings.Cut(l, fmt.Sprintf("gorun rank %d: ", rk.id)); ok && strings.Contains(rest, "made the hierarchical communicators") {
				t.Logf("rank %d: %s", rk.id, rest)
			}
		}
	}
}

// TestPartitionHealExpelsLoneRank cuts one "host" off from the other and
// heals the cut, over real networking, with "grow" ranks over tcp
// (childGrow: shrink on a failure, grow when ranks wait to join), two
// ways: ranks 0-2 on one host and rank 3 on the other, and ranks 0-1
// against 2-3. With the link down, each side shrinks to a world of its
// own ranks (RELIABILITY gap 15: no quorum). With the link up again, each
// sees the other's ranks as joiners and grows: one side must go on, the
// larger or, of two of a size, the one whose world has the lower digest
// (bootstrap/expel.go, comm/expel.go), and every rank of the other must
// fail with comm.ErrExpelled, while no rank of the side that goes on takes
// the expelled processes for ranks to admit. Then the expelled ranks are
// started again, as gorun --max-restarts would, and all four end grown,
// each at its own rank of 4, every result right.
//
// Before 2026-11-29 (3 of the first 10 runs of the 3|1 split) the three,
// as the healed rank spread the deaths it had seen, each took the others
// for dead for a moment and grew into disjoint worlds of one epoch
// (bootstrap's growTable), or both sides grew into one world and every
// rank was expelled (comm's checkMembership).
func TestPartitionHealExpelsLoneRank(t *testing.T) {
	for _, split := range []struct {
		name  string
		first int // ranks on the first host; the rest on the second
	}{{"3|1", 3}, {"2|2", 2}} {
		t.Run(split.name, func(t *testing.T) { partitionHeal(t, split.first) })
	}
}

func partitionHeal(t *testing.T, first int) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	p, j, host, side := startPartitioned(ctx, t, first)
	time.Sleep(500 * time.Millisecond)
	cut := time.Now()
	if err := ipCmd("-n", p.ns[0], "link", "set", p.veth[0], "down"); err != nil {
		t.Fatal(err)
	}
	for _, rk := range j.ranks {
		waitShrunk(ctx, t, j, rk, side(host(rk.id)), cut)
	}
	healed := time.Now()
	if err := ipCmd("-n", p.ns[0], "link", "set", p.veth[0], "up"); err != nil {
		t.Fatal(err)
	}
	// The first rank to fail names the side that does not go on.
	lost := -1
	for lost < 0 {
		for _, rk := range j.ranks {
			if _, ok := rk.event("wrong"); ok {
				lost = host(rk.id)
				break
			}
		}
		if lost >= 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no rank failed after the heal: both sides go on\n%s", j.logs())
		case <-time.After(20 * time.Millisecond):
		}
	}
	if first != 2 && lost != 1 {
		t.Fatalf("the side of %d ranks was expelled, not the single rank\n%s", first, j.logs())
	}
	for _, r := range side(lost) {
		rk := j.ranks[r]
		e, ok := rk.waitEvent(ctx, "wrong")
		if !ok || !strings.Contains(e.Err, comm.ErrExpelled.Error()) {
			t.Fatalf("rank %d, of the side that does not go on: %+v, want its Grow to fail with ErrExpelled\n%s", r, e, j.logs())
		}
		t.Logf("rank %d expelled %v after the heal: %s", r, time.Unix(0, e.T).Sub(healed).Round(time.Millisecond), e.Err)
		if _, _, ok := rk.exit(20 * time.Second); !ok {
			t.Fatalf("rank %d did not exit after its error\n%s", r, rk.log())
		}
	}
	for _, r := range side(1 - lost) {
		rk := j.ranks[r]
		if e, bad := rk.event("wrong"); bad {
			t.Fatalf("rank %d, of the side that goes on: %s\n%s", r, e.Err, j.logs())
		}
		if _, grown := rk.event("grown"); grown {
			t.Fatalf("rank %d grew before the expelled ranks were restarted: it admitted an expelled process\n%s", r, j.logs())
		}
	}
	restartGrown(ctx, t, j, side(lost)...)
}

// startPartitioned starts 4 "grow" ranks over tcp on the two hosts of a
// namespace pair, ranks 0 to first-1 on the first, the rest on the
// second, with env for every rank, and waits until all are ready. host
// gives a rank's host, side a host's ranks.
func startPartitioned(ctx context.Context, t *testing.T, first int, env ...string) (p *netnsPair, j *job, host func(int) int, side func(int) []int) {
	p = newNetnsPair(t)
	host = func(r int) int { return min(r/first, 1) }
	side = func(h int) []int {
		if h == 0 {
			return []int{0, 1, 2, 3}[:first]
		}
		return []int{0, 1, 2, 3}[first:]
	}
	rankEnv := map[int][]string{}
	for r := range 4 {
		rankEnv[r] = []string{"GORUN_SOCKET_IFNAME=" + p.veth[host(r)]}
	}
	j = startJob(t, jobSpec{n: 4, role: "grow", transport: "tcp", timeout: 20 * time.Second,
		env: append([]string{"REL_REINIT=0", "REL_GROW_SHARE=1"}, env...), rankEnv: rankEnv,
		seedHost: p.ip[0], seedPort: 20000 + rand.IntN(20000), wrap: p.host(host)})
	j.waitReady(ctx)
	return p, j, host, side
}

// waitShrunk waits until rk has shrunk, after the cut at cut, to its rank
// among side, its side's ranks.
func waitShrunk(ctx context.Context, t *testing.T, j *job, rk *rank, side []int, cut time.Time) {
	t.Helper()
	e, ok := rk.waitEvent(ctx, "shrunk")
	if !ok {
		t.Fatalf("rank %d did not shrink after the cut\n%s", rk.id, j.logs())
	}
	if want := slices.Index(side, rk.id); e.Iter != want {
		t.Fatalf("rank %d shrank to rank %d, want %d of its side\n%s", rk.id, e.Iter, want, j.logs())
	}
	t.Logf("rank %d shrank to rank %d %v after the cut", rk.id, e.Iter, time.Unix(0, e.T).Sub(cut).Round(time.Millisecond))
}

// TestPartitionQuorum: as TestPartitionHealExpelsLoneRank, with a quorum
// (GORUN_QUORUM=majority). Once cut, only the side with a majority of the
// 4 ranks (3|1), or with half of them and rank 0 (2|2), shrinks and goes
// on; every rank of the other fails its Shrink with ErrNoQuorum and exits
// at once, instead of going on until the heal expels it. Its ranks,
// restarted once the link is back, join, and all four grow back.
func TestPartitionQuorum(t *testing.T) {
	for _, split := range []struct {
		name  string
		first int
	}{{"3|1", 3}, {"2|2", 2}} {
		t.Run(split.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
			defer cancel()
			p, j, _, side := startPartitioned(ctx, t, split.first, "GORUN_QUORUM=majority")
			time.Sleep(500 * time.Millisecond)
			cut := time.Now()
			if err := ipCmd("-n", p.ns[0], "link", "set", p.veth[0], "down"); err != nil {
				t.Fatal(err)
			}
			for _, r := range side(1) { // no majority, and without rank 0
				rk := j.ranks[r]
				e, ok := rk.waitEvent(ctx, "wrong")
				if !ok || !strings.Contains(e.Err, comm.ErrNoQuorum.Error()) {
					t.Fatalf("rank %d, of the side without a quorum: %+v, want its Shrink to fail with ErrNoQuorum\n%s", r, e, j.logs())
				}
				if _, ok := rk.event("shrunk"); ok {
					t.Fatalf("rank %d shrank without a quorum\n%s", r, j.logs())
				}
				t.Logf("rank %d: no quorum %v after the cut: %s", r, time.Unix(0, e.T).Sub(cut).Round(time.Millisecond), e.Err)
				if _, _, ok := rk.exit(20 * time.Second); !ok {
					t.Fatalf("rank %d did not exit after its error\n%s", r, rk.log())
				}
			}
			for _, r := range side(0) {
				waitShrunk(ctx, t, j, j.ranks[r], side(0), cut)
			}
			if err := ipCmd("-n", p.ns[0], "link", "set", p.veth[0], "up"); err != nil {
				t.Fatal(err)
			}
			for _, r := range side(0) {
				if e, bad := j.ranks[r].event("wrong"); bad {
					t.Fatalf("rank %d, of the side that goes on: %s\n%s", r, e.Err, j.logs())
				}
			}
			restartGrown(ctx, t, j, side(1)...)
		})
	}
}
