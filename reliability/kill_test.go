package reliability

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// trialSlots bounds how many 4-rank jobs run at once: two per core keeps
// a 2-core machine busy without starving the ranks' timers.
var trialSlots = make(chan struct{}, max(2, 2*runtime.NumCPU()))

// trial is one randomized kill.
type trial struct {
	transport, op string
	victim        int
	how           string // what killed the victim, for messages
	fault         string // GORUN_FAULT rule, or "" for a SIGKILL from the test
	sigDelay      time.Duration
	holdMS        int // how long survivors keep the communicator open after their error
}

// trialResult is what a trial observed.
type trialResult struct {
	trial
	signalled bool            // killed by the test (exact death time), not by GORUN_FAULT
	drain     []time.Duration // per survivor: Close until goroutines and fds were back to the start
	detect    []time.Duration // per survivor: error time - victim's death
	failures  []string
	closeHang []string // KNOWN BUG: survivors whose Close did not return in 10 s
}

func (r trialResult) String() string {
	return fmt.Sprintf("%s %s victim=%d %s", r.transport, r.op, r.victim, r.how)
}

// randomTrial picks the collective, the victim and the moment it dies:
// either a GORUN_FAULT kill at its Nth write (before or after the post),
// Nth send or Nth completion wait, or a SIGKILL from the test a random
// time after every rank is ready.
func randomTrial(rng *rand.Rand, transport string) trial {
	t := trial{transport: transport, op: []string{"allreduce", "broadcast", "barrier"}[rng.IntN(3)], victim: rng.IntN(4)}
	switch k := rng.IntN(5); k {
	case 0, 1:
		where := []string{"before", "after"}[k]
		t.fault = fmt.Sprintf("rank=%d:kill:write:%d:%s", t.victim, 1+rng.IntN(60), where)
	case 2:
		t.fault = fmt.Sprintf("rank=%d:kill:send:%d", t.victim, 4+rng.IntN(30))
	case 3:
		t.fault = fmt.Sprintf("rank=%d:kill:wait:%d", t.victim, 10+rng.IntN(200))
	default:
		t.sigDelay = time.Duration(rng.IntN(300)) * time.Millisecond
		t.how = fmt.Sprintf("SIGKILL %v after ready", t.sigDelay)
	}
	if t.fault != "" {
		t.how = "GORUN_FAULT=" + t.fault
	}
	return t
}

// runKillTrial starts a 4-rank job looping tr.op, kills tr.victim and
// checks every survivor.
func runKillTrial(t *testing.T, tr trial, timeout time.Duration) trialResult {
	res := trialResult{trial: tr}
	fail := func(format string, args ...any) { res.failures = append(res.failures, fmt.Sprintf(format, args...)) }
	spec := jobSpec{n: 4, role: "coll", transport: tr.transport, timeout: timeout,
		env: []string{"REL_OP=" + tr.op, "REL_COUNT=256", fmt.Sprintf("REL_HOLD_MS=%d", tr.holdMS)}}
	if tr.fault != "" {
		spec.env = append(spec.env, "GORUN_FAULT="+tr.fault)
	}
	j := startJob(t, spec)
	victim := j.ranks[tr.victim]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, rk := range j.ranks {
		if _, ok := rk.waitEvent(ctx, "ready"); !ok && rk != victim {
			// A kill at one of the victim's first writes can come while
			// another rank is still in Init (the victim finished its own
			// first): that Init fails naming the victim, as it should, and
			// the checks below count it as that rank's detection (CI,
			// 2026-11-29: rank=3:kill:write:1 over tcp, ranks 0 and 2 still
			// connecting).
			if e, ok := rk.waitEvent(ctx, "error"); ok && tr.fault != "" && e.ErrRank == tr.victim && strings.HasPrefix(e.Err, "init: ") {
				res.how += fmt.Sprintf(" (in rank %d's Init)", rk.id)
				continue
			}
			fail("rank %d never ready\n%s", rk.id, j.logs())
			return res
		}
	}
	var killAt time.Time
	if tr.fault == "" {
		time.Sleep(tr.sigDelay)
		killAt = time.Now()
		victim.signal(syscall.SIGKILL)
	} else {
		// A rule that is never reached (a barrier that posts no write):
		// fall back to a SIGKILL after 3 s and say so.
		if _, _, ok := victim.exit(3 * time.Second); !ok {
			res.how += " (not reached: sigkill at 3s)"
			killAt = time.Now()
			victim.signal(syscall.SIGKILL)
		}
	}
	st, deathAt, ok := victim.exit(10 * time.Second)
	if !ok {
		fail("victim did not die")
		return res
	}
	if !killAt.IsZero() {
		deathAt = killAt // exact; Wait returns a little later
	}
	res.signalled = !killAt.IsZero()
	if sig := killedBy(st); sig != syscall.SIGKILL {
		fail("victim ended with %v, want SIGKILL\n%s", st, victim.log())
	}
	for _, rk := range j.ranks {
		if rk == victim {
			continue
		}
		_, _, exited := rk.exit(timeout + 15*time.Second)
		if e, ok := rk.event("closehang"); ok {
			res.closeHang = append(res.closeHang, fmt.Sprintf("rank %d: Comm.Close hung:\n%s", rk.id, e.Err))
			continue
		}
		if !exited {
			fail("rank %d hung (no exit %v after the victim died)\n%s", rk.id, timeout+15*time.Second, rk.log())
			continue
		}
		if e, ok := rk.event("wrong"); ok {
			fail("rank %d: WRONG RESULT: %s", rk.id, e.Err)
		}
		e, ok := rk.event("error")
		if !ok {
			fail("rank %d: no error after rank %d died (exit %v)\n%s", rk.id, tr.victim, rk.cmd.ProcessState, rk.log())
			continue
		}
		// For a GORUN_FAULT kill, deathAt is when Wait returned for the
		// victim, a few ms after its death at worst, so a survivor can be
		// "earlier": count that as 0.
		d := max(0, time.Unix(0, e.T).Sub(deathAt))
		res.detect = append(res.detect, d)
		if e.ErrRank != tr.victim {
			fail("rank %d: error names rank %d, want %d: %s", rk.id, e.ErrRank, tr.victim, e.Err)
		}
		if d > timeout+time.Second {
			fail("rank %d: detected after %v, beyond the %v timeout", rk.id, d, timeout)
		}
		a, ok := rk.event("after")
		if !ok {
			fail("rank %d: no report after Close\n%s", rk.id, rk.log())
			continue
		}
		if a.Leak != "" {
			fail("rank %d: leaked after Close: %s", rk.id, a.Leak)
		}
		res.drain = append(res.drain, time.Duration(a.LeakWaitMS)*time.Millisecond)
		if a.Reinit != "" {
			fail("rank %d: new communicator failed: %s", rk.id, a.Reinit)
		}
		if !rk.cmd.ProcessState.Success() {
			fail("rank %d: exit %v\n%s", rk.id, rk.cmd.ProcessState, rk.log())
		}
	}
	// The only files a dead rank may leave are its own unix sockets.
	ents, _ := os.ReadDir(j.dir)
	for _, e := range ents {
		sub, _ := os.ReadDir(j.dir + "/" + e.Name())
		for _, s := range sub {
			if !strings.HasPrefix(s.Name(), fmt.Sprintf("shm-%d-", victim.cmd.Process.Pid)) {
				fail("left behind: %s/%s", e.Name(), s.Name())
			}
		}
	}
	return res
}

// TestKillRandomRank kills a random rank at a random point of allreduce,
// broadcast or barrier, over tcp and shm: every survivor must fail within
// the timeout with an error naming the dead rank, give back its
// goroutines, descriptors and memfds on Close, and be able to build a new
// communicator. REL_TRIALS overrides the number of trials per transport,
// REL_SEED replays a trial list.
func TestKillRandomRank(t *testing.T) {
	perTransport := 50
	if testing.Short() {
		perTransport = 8
	}
	results := killSuite(t, perTransport, 1000)
	var hangs []string
	for _, r := range results {
		for _, f := range r.failures {
			t.Errorf("%v: %s", r, f)
		}
		for _, h := range r.closeHang {
			hangs = append(hangs, fmt.Sprintf("%v: %s", r, h))
		}
	}
	closeHangs(t, hangs)
}

// closeHangs reports survivors whose Comm.Close did not return (until
// 126135d, collectives.Engine.Close waited for every bye with one 500 ms
// timer, which fires once: a second unconfirmed bye blocked it forever).
func closeHangs(t *testing.T, hangs []string) {
	if len(hangs) == 0 {
		return
	}
	t.Errorf("%d survivor(s) hung in Comm.Close; first: %s", len(hangs), hangs[0])
}

// TestKillSurvivorsCloseAtOnce is the same with survivors that Close the
// moment they see the error (and exit): a survivor must not be blamed by
// another survivor (until 126135d its abort notice could lose the race
// with its closing connection).
func TestKillSurvivorsCloseAtOnce(t *testing.T) {
	perTransport := 10
	if testing.Short() {
		perTransport = 4
	}
	results := killSuite(t, perTransport, 0)
	blamed, survivors := 0, 0
	var hangs []string
	for _, r := range results {
		for _, h := range r.closeHang {
			hangs = append(hangs, fmt.Sprintf("%v: %s", r, h))
		}
		survivors += len(r.detect)
		for _, f := range r.failures {
			if strings.Contains(f, "error names rank") && os.Getenv("REL_LENIENT") != "" {
				blamed++
				t.Logf("%v: %s", r, f)
				continue
			}
			t.Errorf("%v: %s", r, f)
		}
	}
	if blamed > 0 {
		t.Logf("REL_LENIENT: %d of %d survivors named another survivor instead of the dead rank", blamed, survivors)
	}
	closeHangs(t, hangs)
}

// killSuite runs perTransport random kill trials on tcp and on shm,
// concurrently, and logs the detection times.
func killSuite(t *testing.T, perTransport, holdMS int) []trialResult {
	if n := envInt("REL_TRIALS", 0); n > 0 {
		perTransport = n
	}
	seed := uint64(time.Now().UnixNano())
	if s := envInt("REL_SEED", 0); s != 0 {
		seed = uint64(s)
	}
	t.Logf("seed %d (REL_SEED reproduces the trial list)", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	const timeout = 5 * time.Second
	var trials []trial
	for range perTransport {
		for _, tr := range []string{"tcp", "shm"} {
			x := randomTrial(rng, tr)
			x.holdMS = holdMS
			trials = append(trials, x)
		}
	}
	shmBefore := devShm()
	defer func() {
		// No provider uses /dev/shm (shm's segments are memfds, checked in
		// each survivor); anything gorun leaves there is a leak.
		for name := range devShm() {
			if !shmBefore[name] {
				if strings.Contains(strings.ToLower(name), "gorun") {
					t.Errorf("left in /dev/shm: %s", name)
				} else {
					t.Logf("new in /dev/shm (not gorun's?): %s", name)
				}
			}
		}
	}()
	results := make([]trialResult, len(trials))
	var wg sync.WaitGroup
	for i, tr := range trials {
		wg.Add(1)
		trialSlots <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-trialSlots }()
			results[i] = runKillTrial(t, tr, timeout)
		}()
	}
	wg.Wait()
	byKey := map[string][]time.Duration{}
	for _, r := range results {
		ds := make([]string, len(r.detect))
		for i, d := range r.detect {
			ds[i] = d.Round(100 * time.Microsecond).String()
		}
		t.Logf("trial %v: detection %s", r, strings.Join(ds, " "))
		byKey[r.transport+" "+r.op] = append(byKey[r.transport+" "+r.op], r.detect...)
		byKey[r.transport+" all"] = append(byKey[r.transport+" all"], r.detect...)
		if r.signalled {
			byKey[r.transport+" sigkill"] = append(byKey[r.transport+" sigkill"], r.detect...)
		} else {
			byKey[r.transport+" fault"] = append(byKey[r.transport+" fault"], r.detect...)
		}
	}
	report(t, "kill -9", byKey)
	drain := map[string][]time.Duration{}
	for _, r := range results {
		drain[r.transport] = append(drain[r.transport], r.drain...)
	}
	report(t, "drain after Close", drain)
	return results
}

// report logs the median and worst detection time per key.
func report(t *testing.T, what string, byKey map[string][]time.Duration) {
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		ds := byKey[k]
		if len(ds) == 0 {
			continue
		}
		slices.Sort(ds)
		t.Logf("%s %-16s n=%3d median %v worst %v", what, k, len(ds),
			ds[len(ds)/2].Round(time.Millisecond), ds[len(ds)-1].Round(time.Millisecond))
	}
}

// devShm lists /dev/shm.
func devShm() map[string]bool {
	m := map[string]bool{}
	ents, _ := os.ReadDir("/dev/shm")
	for _, e := range ents {
		m[e.Name()] = true
	}
	return m
}
