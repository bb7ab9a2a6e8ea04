package reliability

import (
	"strings"
	"testing"

	"github.com/gorun-hpc/gorun/launcher"
	"github.com/gorun-hpc/gorun/transport/rdma/faulty"
)

// Fuzzers for the decoders of outside bytes that had none (see
// RELIABILITY.md for the ones that already do: tcp frames and handshake,
// gossip metadata, hostfiles). Their seed corpora run as normal tests.

// shellSafe is what the launcher promises about a host name it accepts:
// nothing a shell or an agent's option parser could interpret.
func shellSafe(name string) bool {
	if name == "" || name[0] == '-' || len(name) > 255 {
		return false
	}
	return !strings.ContainsAny(name, " \t\n\r;|&$`'\"\\()<>*?[]{}!#~=/,")
}

// FuzzParseHostList: -H values (from a user, a script or a scheduler).
func FuzzParseHostList(f *testing.F) {
	for _, s := range []string{"a:2,b:2", "[::1]:2", "node1", "$(touch x):1", "a:0", "a:99999999999",
		"[fe80::1%eth0]:1", "a,,b", "-oProxyCommand=x", "[", "]:", "a:1:2", "user@h:3", "h\n:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		hosts, err := launcher.ParseHostList(s)
		if err != nil {
			return
		}
		for _, h := range hosts {
			if !shellSafe(h.Name) {
				t.Fatalf("ParseHostList(%q) accepted host %q", s, h.Name)
			}
			if h.Slots < 1 || h.Slots > 1<<20 {
				t.Fatalf("ParseHostList(%q): host %q has %d slots", s, h.Name, h.Slots)
			}
		}
	})
}

// FuzzFirstHost: Slurm node lists (SLURM_JOB_NODELIST) become the seed
// host. It must not panic, and what it returns is one host: no list
// separator, no unexpanded range.
func FuzzFirstHost(f *testing.F) {
	for _, s := range []string{"node[07-09,12],gpu1", "a", "", "[", "]", "n[1-2]-ib[3-4]", "x[,]", "a[1", "a]1[", "[[[]]]", ",", "n[01-02]x,y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		h := launcher.FirstHost(s)
		if strings.ContainsAny(h, ",") {
			t.Fatalf("FirstHost(%q) = %q: more than one host", s, h)
		}
	})
}

// FuzzParsePlan: GORUN_FAULT values. Any input either fails or yields
// rules that print back in the plan syntax.
func FuzzParsePlan(f *testing.F) {
	for _, s := range []string{"rank=2:kill:write:40", "delay:any:0:after:5ms", "freeze:wait", ";;", "rank=-1:cut",
		"drop:send:1:before:1h", "kill:write:99999999999999999999", "rank=1:delay:recv:3:wait:-1s"} {
		f.Add(s, 2)
	}
	f.Fuzz(func(t *testing.T, s string, rank int) {
		p, err := faulty.ParsePlan(s, rank)
		if err != nil {
			return
		}
		for _, r := range p.Rules {
			if r.After < 0 || r.Delay < 0 {
				t.Fatalf("ParsePlan(%q): rule %v has a negative count or delay", s, r)
			}
			if _, err := faulty.ParsePlan(r.String(), -1); err != nil {
				t.Fatalf("ParsePlan(%q): rule %v does not parse back: %v", s, r, err)
			}
		}
	})
}
