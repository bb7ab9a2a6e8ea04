package jobctl

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"testing"
	"time"
)

func listen(t *testing.T, token string) *Server {
	t.Helper()
	s, err := Listen(context.Background(), "127.0.0.1:0", []byte(token))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// waitFor polls the server until cond holds or fails the test after 5s.
func waitFor(t *testing.T, s *Server, what string, cond func(Snapshot) bool) Snapshot {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ch := s.Changed()
		snap := s.Snapshot()
		if cond(snap) {
			return snap
		}
		select {
		case <-ch:
		case <-time.After(time.Until(deadline)):
			t.Fatalf("timed out waiting for %s; last snapshot %+v", what, s.Snapshot())
		}
	}
}

func TestClientReportsState(t *testing.T) {
	s := listen(t, "secret")
	c := newClient(s.Addr().String(), []byte("secret"), -1, 10*time.Millisecond)
	defer c.Close()

	c.Phase(3, "bootstrap")
	waitFor(t, s, "phase bootstrap", func(sn Snapshot) bool {
		return len(sn.Ranks) == 1 && sn.Ranks[0].Rank == 3 && sn.Ranks[0].Phase == "bootstrap"
	})
	c.Joined(3)
	c.Phase(3, "ready")
	c.Enter("allreduce", 812)
	snap := waitFor(t, s, "in allreduce", func(sn Snapshot) bool {
		r := sn.Ranks[0]
		return r.Joined && r.Phase == "ready" && r.InOp && r.Op == "allreduce" && r.Seq == 812
	})
	if !snap.Ranks[0].Connected {
		t.Errorf("rank not marked connected: %+v", snap.Ranks[0])
	}
	c.Leave()
	waitFor(t, s, "left allreduce", func(sn Snapshot) bool {
		r := sn.Ranks[0]
		return !r.InOp && r.Op == "allreduce" && r.Seq == 812
	})
	c.Close()
	waitFor(t, s, "done", func(sn Snapshot) bool { return sn.Ranks[0].Done })
}

func TestWrongTokenIsRejected(t *testing.T) {
	s := listen(t, "right")
	c := newClient(s.Addr().String(), []byte("wrong"), 0, 10*time.Millisecond)
	defer c.Close()
	c.Phase(0, "ready")
	waitFor(t, s, "auth failure", func(sn Snapshot) bool { return sn.AuthFailures > 0 })
	if n := len(s.Snapshot().Ranks); n != 0 {
		t.Fatalf("server accepted %d ranks with a wrong token", n)
	}
}

// A line authenticated for one connection cannot be replayed on another.
func TestReplayIsRejected(t *testing.T) {
	s := listen(t, "tok")
	conn, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := bufio.NewReader(conn).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	payload, _ := json.Marshal(Report{Rank: 1, Phase: "ready"})
	fmt.Fprintf(conn, "%s %s\n", mac([]byte("tok"), "some-other-nonce", 0, payload), payload)
	waitFor(t, s, "auth failure", func(sn Snapshot) bool { return sn.AuthFailures == 1 })
	if len(s.Snapshot().Ranks) != 0 {
		t.Fatal("replayed line accepted")
	}
}

func TestNilAndAbsentClient(t *testing.T) {
	t.Setenv(EnvControl, "")
	c := FromEnv()
	if c != nil {
		t.Fatalf("FromEnv without %s = %v, want nil", EnvControl, c)
	}
	c.Joined(0)
	c.Phase(0, "ready")
	c.Enter("allreduce", 1)
	c.Leave()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

// With no server the client neither blocks its caller nor Close for long.
func TestUnreachableServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	t.Setenv(EnvControl, addr)
	t.Setenv(EnvRank, "2")
	c := FromEnv()
	if c == nil {
		t.Fatal("FromEnv returned nil with GORUN_CONTROL set")
	}
	start := time.Now()
	for i := 0; i < 1000; i++ {
		c.Enter("broadcast", uint64(i))
		c.Leave()
	}
	c.Phase(2, "ready")
	c.Close()
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("calls and Close took %v with no server", d)
	}
}

func TestEnterLeaveDoNotAllocate(t *testing.T) {
	c := newClient("127.0.0.1:1", nil, 0, time.Hour)
	defer c.Close()
	c.Enter("allreduce", 0)
	c.Enter("broadcast", 0)
	n := testing.AllocsPerRun(100, func() {
		c.Enter("allreduce", 7)
		c.Leave()
		c.Enter("broadcast", 8)
		c.Leave()
	})
	if n != 0 {
		t.Fatalf("Enter+Leave allocate %v times", n)
	}
}

func TestStallReport(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ago := func(s int) time.Time { return now.Add(-time.Duration(s) * time.Second) }
	snap := Snapshot{
		LastProgress: ago(31),
		Ranks: []RankState{
			{Rank: 0, Connected: true, InOp: true, Op: "allreduce", Seq: 812, Since: ago(31)},
			{Rank: 1, Connected: true, InOp: true, Op: "allreduce", Seq: 812, Since: ago(30)},
			{Rank: 2, Connected: true, InOp: true, Op: "broadcast", Seq: 811, Since: ago(40)},
			{Rank: 3, Connected: true, InOp: true, Op: "allreduce", Seq: 812, Since: ago(31)},
			{Rank: 4, Connected: true, Op: "allreduce", Seq: 811, Since: ago(35)},
			{Rank: 5, Connected: false, Op: "allreduce", Seq: 811, LastSeen: ago(20)},
			// Closed its client: whether it failed, or still runs, is not
			// known here, so not "finished".
			{Rank: 6, Done: true, Op: "allreduce", Seq: 811, Since: ago(50)},
		},
	}
	if !snap.Stalled(now, 30*time.Second) {
		t.Fatal("Stalled = false after 31s without progress")
	}
	if snap.Stalled(now, 32*time.Second) {
		t.Fatal("Stalled = true before the threshold")
	}
	got := snap.StallReport(now, 8)
	want := "stall: ranks 0,1,3 in allreduce #812 for 31s; rank 2 in broadcast #811 for 40s; " +
		"rank 4 idle after allreduce #811 for 35s; rank 6 closed its job-control connection; rank 5 disconnected; rank 7 silent"
	if got != want {
		t.Fatalf("StallReport =\n %s\nwant\n %s", got, want)
	}
	idle := Snapshot{LastProgress: ago(60), Ranks: []RankState{{Rank: 0, Connected: true, Op: "x"}}}
	if idle.Stalled(now, time.Second) {
		t.Fatal("Stalled = true with no rank inside a collective")
	}
}

func TestRankList(t *testing.T) {
	for _, tc := range []struct {
		in   []int
		want string
	}{
		{nil, ""},
		{[]int{4}, "4"},
		{[]int{0, 1}, "0,1"},
		{[]int{0, 1, 3}, "0,1,3"},
		{[]int{0, 1, 2, 3, 5, 7, 8, 9}, "0-3,5,7-9"},
	} {
		if got := RankList(tc.in); got != tc.want {
			t.Errorf("RankList(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func BenchmarkEnterLeave(b *testing.B) {
	c := newClient("127.0.0.1:1", nil, 0, time.Hour)
	defer c.Close()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		c.Enter("allreduce", uint64(i))
		c.Leave()
	}
}

// Blame reaches the launcher at once (the interval here is an hour), names
// rank 0 too, and the first call counts.
func TestClientBlame(t *testing.T) {
	s := listen(t, "secret")
	c := newClient(s.Addr().String(), []byte("secret"), 2, time.Hour)
	defer c.Close()
	c.Joined(2)
	waitFor(t, s, "joined", func(sn Snapshot) bool { return len(sn.Ranks) == 1 && sn.Ranks[0].Joined })
	if r := s.Snapshot().Ranks[0]; r.Blamed {
		t.Fatalf("blamed before Blame: %+v", r)
	}
	c.Blame(0)
	c.Blame(1)
	waitFor(t, s, "blame of rank 0", func(sn Snapshot) bool { return sn.Ranks[0].Blamed && sn.Ranks[0].Cause == 0 })
	c.Close()
	snap := waitFor(t, s, "done", func(sn Snapshot) bool { return sn.Ranks[0].Done })
	if r := snap.Ranks[0]; !r.Blamed || r.Cause != 0 {
		t.Errorf("after Close: %+v, want rank 0 blamed", r)
	}
	var nilc *Client
	nilc.Blame(1)
}

// A forming rank hears of ranks that ended before they joined in the
// order they ended: rank 0's Init failed because rank 2 ended, so rank 0
// ended after it, and rank 1 must hear of rank 2 first to name the cause
// (the fresh-clone CI of 86fc3e0..62ae099 had rank 1 name rank 0, the
// list then being sorted by rank).
func TestWatchExitsInOrder(t *testing.T) {
	s := listen(t, "secret")
	s.Exited(2, "exit status 3")
	s.Exited(0, "exit status 1")
	if s.Exited(0, "exit status 1") != true {
		t.Fatal("Exited of a rank that never joined reported false")
	}
	c := newClient(s.Addr().String(), []byte("secret"), 1, time.Hour)
	defer c.Close()
	got := make(chan Exit, 4)
	stop := c.WatchExits(func(e Exit) { got <- e })
	defer stop()
	c.Phase(1, "bootstrap")
	for i, want := range []Exit{{2, "exit status 3"}, {0, "exit status 1"}} {
		select {
		case e := <-got:
			if e != want {
				t.Fatalf("exit %d heard: %+v, want %+v", i, e, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("exit %d (%+v) not heard", i, want)
		}
	}
}
