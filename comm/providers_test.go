package comm

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// comm's lists come from what providers declare when they register.
func TestProvidersFromRegistry(t *testing.T) {
	if got := autoProviders(rdma.ReachProcess, rdma.ReachProcess); !slices.Equal(got, []string{"mem"}) {
		t.Errorf("NewLocal's auto providers = %v, want [mem]", got)
	}
	init := autoProviders(rdma.ReachHost, rdma.ReachNetwork)
	if i, j := slices.Index(init, "shm"), slices.Index(init, "tcp"); i < 0 || j < 0 || i > j || slices.Contains(init, "mem") {
		t.Errorf("Init's auto providers = %v, want shm before tcp and no mem", init)
	}
	for name, ip := range map[string]bool{"tcp": true, "shm": false, "mem": false} {
		if info, ok := rdma.LookupProvider(name); !ok || info.NeedsIP != ip {
			t.Errorf("LookupProvider(%q) = %+v %v, want NeedsIP %v", name, info, ok, ip)
		}
	}
	// A provider registered at run time is accepted by name, never picked
	// by auto (it declared no preference).
	rdma.RegisterProviderInfo(rdma.ProviderInfo{Name: "test-reach", Reach: rdma.ReachNetwork}, func(rdma.Config) (rdma.Device, error) {
		return nil, rdma.ErrNotSupported
	})
	if _, err := parseTransport("Test-Reach"); err != nil {
		t.Errorf("registered provider refused: %v", err)
	}
	if slices.Contains(autoProviders(rdma.ReachProcess, rdma.ReachNetwork), "test-reach") {
		t.Error("a provider without preference is picked by auto")
	}
	_, err := parseTransport("infiniband")
	if err == nil || !strings.Contains(err.Error(), "tcp") || !strings.Contains(err.Error(), "test-reach") {
		t.Errorf("unknown transport: %v, want the registered names", err)
	}
}

func TestPickProviderByReach(t *testing.T) {
	a := &endpoint{host: [8]byte{1}, pid: 1, addrs: map[string]string{"mem": "m", "shm": "s", "tcp": "t"}}
	samePID := &endpoint{host: [8]byte{1}, pid: 1, addrs: a.addrs}
	sameHost := &endpoint{host: [8]byte{1}, pid: 2, addrs: a.addrs}
	other := &endpoint{host: [8]byte{2}, pid: 1, addrs: a.addrs}
	for _, c := range []struct {
		peer *endpoint
		want string
	}{{samePID, "mem"}, {sameHost, "shm"}, {other, "tcp"}} {
		if got := pickProvider("auto", a, c.peer); got != c.want {
			t.Errorf("pickProvider to %+v = %q, want %q", c.peer, got, c.want)
		}
	}
}

// gorun --transport mem: every rank fails in Init, before it looks for
// peers (the error comes before the bootstrap, whose seed here is dead).
func TestInitRefusesProcessOnlyTransport(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := initFromEnv(ctx, mapEnv(map[string]string{"GORUN_RANK": "1", "GORUN_SIZE": "2", "GORUN_SEEDS": "127.0.0.1:1"}), WithTransport("mem"))
	if err == nil || !strings.Contains(err.Error(), `"mem"`) || !strings.Contains(err.Error(), "one process") {
		t.Fatalf("Init with mem in a 2-rank job: %v", err)
	}
}

// GORUN_FAULT in a binary without transport/rdma/faulty (comm's own test
// binary does not import it) fails clearly instead of being ignored.
func TestFaultWithoutInjectionLinkedIn(t *testing.T) {
	if rdma.LookupWrapper("faulty") != nil {
		t.Skip("faulty is linked into this binary")
	}
	old := osGetenv
	defer func() { osGetenv = old }()
	osGetenv = mapEnv(map[string]string{"GORUN_FAULT": "rank=0:kill:write:1"})
	dev, err := rdma.Open("mem")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := withFault(dev, 0); err == nil || !strings.Contains(err.Error(), "faulty") {
		t.Fatalf("withFault without faulty linked in: %v", err)
	}
}
