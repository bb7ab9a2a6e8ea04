package comm

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/bootstrap"
)

// waitState polls pid's state until it is want (the kernel applies a
// signal asynchronously).
func waitState(t *testing.T, pid uint32, want byte) {
	t.Helper()
	for range 2000 {
		if s, _, err := procStat(pid); err == nil && s == want {
			return
		}
		time.Sleep(time.Millisecond)
	}
	s, _, err := procStat(pid)
	t.Fatalf("pid %d: state %c (%v), want %c", pid, s, err, want)
}

// sleeper starts a process that sleeps for a minute (killed at the end of
// the test) and returns it with its pid and start time.
func sleeper(t *testing.T) (*exec.Cmd, uint32, uint64) {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Skip("no sleep binary:", err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	pid := uint32(cmd.Process.Pid)
	_, start, err := procStat(pid)
	if err != nil || start == 0 {
		t.Fatalf("procStat(%d) = %d, %v", pid, start, err)
	}
	return cmd, pid, start
}

// The witness's reading of a process: running is alive; stopped is frozen
// only once it has lasted witnessStopped (by the clock passed in), and
// running again resets that; a zombie and a reaped process are gone once
// seen ended for witnessEnded.
func TestWitnessReadsProcessState(t *testing.T) {
	cmd, pid, start := sleeper(t)
	p := &watchedRank{rank: 1, pid: pid, start: start}
	t0 := time.Now()
	if p.frozenOrGone(t0) {
		t.Fatal("a sleeping process declared frozen")
	}
	cmd.Process.Signal(syscall.SIGSTOP)
	waitState(t, pid, 'T')
	if p.frozenOrGone(t0) || p.frozenOrGone(t0.Add(witnessStopped-time.Millisecond)) {
		t.Fatal("a process stopped for less than witnessStopped declared frozen")
	}
	if !p.frozenOrGone(t0.Add(witnessStopped)) {
		t.Fatal("a process stopped for witnessStopped not declared frozen")
	}
	cmd.Process.Signal(syscall.SIGCONT)
	waitState(t, pid, 'S')
	if p.frozenOrGone(t0.Add(time.Minute)) || !p.stoppedSince.IsZero() {
		t.Fatal("a resumed process declared frozen, or its stop not forgotten")
	}
	cmd.Process.Signal(syscall.SIGSTOP) // a new stop starts a new count
	waitState(t, pid, 'T')
	if p.frozenOrGone(t0.Add(2 * time.Minute)) {
		t.Fatal("a new stop counted from the old one")
	}
	cmd.Process.Kill()
	waitState(t, pid, 'Z')
	t1 := t0.Add(3 * time.Minute)
	if p.frozenOrGone(t1) || p.frozenOrGone(t1.Add(witnessEnded-time.Millisecond)) {
		t.Fatal("a zombie declared gone before witnessEnded")
	}
	if !p.frozenOrGone(t1.Add(witnessEnded)) {
		t.Fatal("a zombie not declared gone after witnessEnded")
	}
	cmd.Wait()
	if !p.frozenOrGone(t1.Add(witnessEnded)) {
		t.Fatal("a reaped process not declared gone")
	}
	// Another process behind the same pid (another start time) is not the one watched.
	self, _, _ := procStat(uint32(os.Getpid()))
	q := &watchedRank{rank: 1, pid: uint32(os.Getpid()), start: selfStart() + 1}
	if self == 0 || q.frozenOrGone(t0) || !q.frozenOrGone(t0.Add(witnessEnded)) {
		t.Fatal("a pid whose start time differs not declared gone after witnessEnded")
	}
}

// watchSet picks the two ranks before this one among the ranks of its host
// whose process it can see, and never this process, a process of another
// host, or a pid whose start time does not match.
func TestWatchSet(t *testing.T) {
	var kids []uint32
	for range 3 {
		cmd := exec.Command("sleep", "60")
		if err := cmd.Start(); err != nil {
			t.Skip("no sleep binary:", err)
		}
		defer func() { cmd.Process.Kill(); cmd.Wait() }()
		kids = append(kids, uint32(cmd.Process.Pid))
	}
	startOf := func(pid uint32) uint64 { _, s, _ := procStat(pid); return s }
	other := hostIdentity()
	other[0]++
	eps := []*endpoint{
		{host: hostIdentity(), pid: kids[0], start: startOf(kids[0])},        // 0: watched by 2 (and by 4)
		{host: other, pid: kids[1], start: startOf(kids[1])},                 // 1: another host
		{host: hostIdentity(), pid: uint32(os.Getpid()), start: selfStart()}, // 2: this rank
		{host: hostIdentity(), pid: kids[1], start: startOf(kids[1]) + 7},    // 3: stale start time
		{host: hostIdentity(), pid: kids[2], start: startOf(kids[2])},        // 4
	}
	w := bootstrap.World{Rank: 2, Size: len(eps), Epoch: 1}
	for r, ep := range eps {
		ep.addrs = map[string]string{}
		b, err := ep.marshal()
		if err != nil {
			t.Fatal(err)
		}
		w.Members = append(w.Members, bootstrap.Member{Rank: r, Blob: b})
	}
	// Host ranks in order: 0, 2, 3, 4. Before 2, cyclically: 0 and 4.
	set := watchSet(w)
	got := map[int]bool{}
	for _, p := range set {
		got[p.rank] = true
	}
	if len(set) != 2 || !got[0] || !got[4] {
		t.Errorf("rank 2 watches %v, want ranks 0 and 4", got)
	}
	// Rank 4's two before it are 3 (stale: skipped) and 2 (this process: skipped).
	w.Rank = 4
	eps4 := *eps[4]
	eps4.pid, eps4.start = uint32(os.Getpid()), selfStart()
	b, _ := eps4.marshal()
	w.Members[4].Blob = b
	if set := watchSet(w); len(set) != 0 {
		t.Errorf("rank 4 watches %d ranks, want none", len(set))
	}
}

// runningHere, the bootstrap's veto of a gossip death: another process on
// this host that sleeps or runs is running; stopped, a zombie, gone, this
// process, another host, or no start time are not. endedHere, the
// bootstrap's word for a probe that finds a member's port open: only a
// zombie, or a process gone (its pid reused), on this host has ended.
func TestRunningHere(t *testing.T) {
	cmd, pid, start := sleeper(t)
	member := func(ep endpoint) bootstrap.Member {
		b, err := ep.marshal()
		if err != nil {
			t.Fatal(err)
		}
		return bootstrap.Member{Rank: 1, Blob: b}
	}
	check := func(what string, ep endpoint, running, ended bool) {
		t.Helper()
		if got := runningHere(member(ep)); got != running {
			t.Errorf("%s: runningHere %v, want %v", what, got, running)
		}
		if got := endedHere(member(ep)); got != ended {
			t.Errorf("%s: endedHere %v, want %v", what, got, ended)
		}
	}
	here := endpoint{host: hostIdentity(), pid: pid, start: start, addrs: map[string]string{}}
	check("a sleeping process on this host", here, true, false)
	check("this process", endpoint{host: hostIdentity(), pid: uint32(os.Getpid()), start: selfStart(), addrs: map[string]string{}}, false, false)
	// A rank of this process runs while its gossip node is open (inProcess).
	self := member(endpoint{host: hostIdentity(), pid: uint32(os.Getpid()), start: selfStart(), addrs: map[string]string{}})
	self.Name = "r1-in-process"
	inProcess.Store(self.Name, struct{}{})
	if !runningHere(self) || endedHere(self) {
		t.Error("a rank of this process whose node is open: not running, or ended")
	}
	inProcess.Delete(self.Name)
	if runningHere(self) {
		t.Error("a rank of this process whose node left: running")
	}
	check("another host", endpoint{host: [8]byte{'o', 't', 'h', 'e', 'r'}, pid: pid, start: start, addrs: map[string]string{}}, false, false)
	check("no start time", endpoint{host: hostIdentity(), pid: pid, addrs: map[string]string{}}, false, false)
	check("pid reused", endpoint{host: hostIdentity(), pid: pid, start: start + 1, addrs: map[string]string{}}, false, true)
	if runningHere(bootstrap.Member{Blob: []byte("junk")}) || endedHere(bootstrap.Member{Blob: []byte("junk")}) {
		t.Error("an unparsable endpoint: running or ended")
	}
	cmd.Process.Signal(syscall.SIGSTOP)
	waitState(t, pid, 'T')
	check("a stopped process", here, false, false)
	cmd.Process.Kill()
	waitState(t, pid, 'Z') // not reaped yet
	check("a zombie", here, false, true)
	cmd.Wait()
	check("a reaped process", here, false, true)
}
