package faulty

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
	_ "github.com/gorun-hpc/gorun/transport/rdma/mem"
	_ "github.com/gorun-hpc/gorun/transport/rdma/tcp"
)

func TestParsePlan(t *testing.T) {
	p, err := ParsePlan("rank=2:kill:write:37; delay:send:0:after:5ms ;rank=1:freeze:wait:3", 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Rules) != 2 {
		t.Fatalf("rank 2 keeps %d rules, want 2 (the rank=1 rule is dropped)", len(p.Rules))
	}
	k, d := p.Rules[0], p.Rules[1]
	if k.Action != Kill || k.Op != "write" || k.After != 37 || k.At != BeforePost {
		t.Errorf("kill rule = %v", k)
	}
	if d.Action != Delay || d.Op != "send" || d.After != 0 || d.At != AfterPost || d.Delay != 5*time.Millisecond {
		t.Errorf("delay rule = %v", d)
	}
	all, _ := ParsePlan("rank=1:freeze:wait:3", -1)
	if len(all.Rules) != 1 || all.Rules[0].At != InWait {
		t.Errorf("wait op must imply the wait point: %v", all.Rules)
	}
	for _, bad := range []string{"explode", "kill:teleport", "kill:write:-1", "kill:write:1:sideways", "rank=x:kill", "delay:send:1:before:soon", "a:b:c:d:e:f", "rank=1,kill"} {
		if _, err := ParsePlan(bad, 0); err == nil {
			t.Errorf("ParsePlan(%q) accepted", bad)
		}
		if _, err := Ranks(bad); err == nil {
			t.Errorf("Ranks(%q) accepted", bad)
		}
	}
	if rs, err := Ranks("rank=2:kill:write:37; delay:send:0:after:5ms ;rank=1:freeze:wait:3"); err != nil || !slices.Equal(rs, []int{2, 1}) {
		t.Errorf("Ranks = %v, %v; want [2 1]", rs, err)
	}
}

// pair connects two devices of provider prov, the dialer's wrapped in plan.
func pair(t *testing.T, prov string, plan *Plan) (a, b rdma.Conn, devA, devB rdma.Device) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var err error
	if devA, err = rdma.Open(prov); err != nil {
		t.Fatal(err)
	}
	if devB, err = rdma.Open(prov); err != nil {
		t.Fatal(err)
	}
	devA = Wrap(devA, plan)
	t.Cleanup(func() { devA.Close(); devB.Close() })
	ln, err := devB.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan rdma.Conn, 1)
	go func() {
		c, err := ln.Accept(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- c
	}()
	if a, err = devA.Dial(ctx, ln.Addr().String()); err != nil {
		t.Fatal(err)
	}
	return a, <-got, devA, devB
}

func TestWrapKeepsCounters(t *testing.T) {
	dev, err := rdma.Open("tcp")
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	w := Wrap(dev, &Plan{Rules: []*Rule{{Action: Delay}}})
	if _, ok := w.(rdma.CounterSource); !ok {
		t.Fatal("a wrapped tcp device hides its counters")
	}
}

func TestDropSwallowsOneSend(t *testing.T) {
	a, b, devA, devB := pair(t, "mem", &Plan{Rules: []*Rule{{Op: "send", After: 2, Action: Drop}}})
	src, _ := devA.Register(make([]byte, 8), rdma.AccessLocalWrite)
	dst, _ := devB.Register(make([]byte, 8), rdma.AccessLocalWrite)
	for i := 0; i < 3; i++ {
		if err := b.PostRecv(uint64(i), dst.Bytes(), dst); err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i <= 3; i++ {
		if err := a.PostSend(uint64(i), src.Bytes(), src, rdma.FlagSignaled); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var ids []uint64
	for i := 0; i < 2; i++ {
		wc, err := a.GetSendComp(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, wc.WRID)
	}
	if ids[0] != 1 || ids[1] != 3 {
		t.Fatalf("completions %v, want [1 3]: send 2 must vanish", ids)
	}
	short, cancel2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel2()
	if _, err := a.GetSendComp(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a dropped send completed: %v", err)
	}
}

func TestCutAndHook(t *testing.T) {
	hooked := 0
	a, b, devA, devB := pair(t, "mem", &Plan{Rules: []*Rule{
		{Op: "write", After: 0, At: AfterPost, Action: Hook, Hook: func() { hooked++ }},
		{Op: "write", After: 2, Action: Cut},
	}})
	src, _ := devA.Register(make([]byte, 8), rdma.AccessLocalWrite)
	dst, _ := devB.Register(make([]byte, 8), rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
	if err := a.PostWrite(1, src.Bytes(), src, rdma.FlagSignaled, dst.Addr(), dst.RKey()); err != nil {
		t.Fatal(err)
	}
	ctx0, cancel0 := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel0()
	if wc, err := a.GetSendComp(ctx0); err != nil || wc.Status != rdma.StatusSuccess {
		t.Fatalf("first write: %v %v", wc, err)
	}
	if hooked != 1 {
		t.Fatalf("hook ran %d times after one write, want 1", hooked)
	}
	err := a.PostWrite(2, src.Bytes(), src, rdma.FlagSignaled, dst.Addr(), dst.RKey())
	if err == nil {
		t.Fatal("a write on a cut connection was accepted")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for {
		if _, err := b.GetRecvComp(ctx); err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				t.Fatal("the peer of a cut connection never noticed")
			}
			break
		}
	}
}

func TestProxyCorruptsAndPartitions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	devA, _ := rdma.Open("tcp")
	devB, _ := rdma.Open("tcp")
	defer devA.Close()
	defer devB.Close()
	ln, err := devB.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	px := &Proxy{Target: ln.Addr().String()}
	if err := px.Listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	got := make(chan rdma.Conn, 1)
	go func() { c, _ := ln.Accept(ctx); got <- c }()
	a, err := devA.Dial(ctx, px.Addr())
	if err != nil {
		t.Fatal(err)
	}
	b := <-got
	if b == nil {
		t.Fatal("accept failed")
	}
	src, _ := devA.Alloc(4096, rdma.AccessLocalWrite)
	dst, _ := devB.Alloc(4096, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
	for i := range src.Bytes() {
		src.Bytes()[i] = byte(i)
	}
	// Through a working proxy, a write lands intact.
	if err := a.PostWrite(1, src.Bytes(), src, rdma.FlagSignaled, dst.Addr(), dst.RKey()); err != nil {
		t.Fatal(err)
	}
	if wc, err := a.GetSendComp(ctx); err != nil || wc.Status != rdma.StatusSuccess {
		t.Fatalf("write through proxy: %v %v", wc, err)
	}
	if dst.Bytes()[4095] != byte(4095%256) {
		t.Fatal("data through the proxy differs")
	}
	// Partitioned: the next write cannot complete while the link is down...
	px.Partition(true)
	if err := a.PostWrite(2, src.Bytes(), src, rdma.FlagSignaled, dst.Addr(), dst.RKey()); err != nil {
		t.Fatal(err)
	}
	short, c2 := context.WithTimeout(ctx, 200*time.Millisecond)
	defer c2()
	if _, err := a.GetSendComp(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a write completed across a partition: %v", err)
	}
	// ...and completes when the link heals.
	px.Partition(false)
	if wc, err := a.GetSendComp(ctx); err != nil || wc.WRID != 2 {
		t.Fatalf("after healing: %v %v", wc, err)
	}
}
