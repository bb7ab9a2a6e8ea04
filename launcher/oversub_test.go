package launcher

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestBindWarning(t *testing.T) {
	if w := bindWarning("core", map[int][]int{0: {0}, 1: {1}}); w != "" {
		t.Errorf("one core each: %q", w)
	}
	w := bindWarning("core", map[int][]int{0: {0}, 1: {1}, 2: {0}, 3: {1}})
	if !strings.Contains(w, "4 local ranks on 2 CPUs") || !strings.Contains(w, "[2 3]") {
		t.Errorf("4 ranks on 2 cores: %q", w)
	}
	if w := bindWarning("numa", map[int][]int{0: {0, 1}, 1: {0, 1}}); w != "" {
		t.Errorf("numa binding shares a node by design: %q", w)
	}
}

func TestBindingReport(t *testing.T) {
	slots := []Slot{{Rank: 0, Host: "localhost"}, {Rank: 1, Host: "localhost"}, {Rank: 2, Host: "node9.invalid"}}
	got := strings.Join(bindingReport(slots, map[int][]int{0: {0}, 1: {1}}, "core"), "\n")
	for _, want := range []string{"rank 0 bound to CPUs [0] (--bind-to core)", "rank 1 bound to CPUs [1]", "rank 2 on node9.invalid: binds itself at start (--bind-to core)"} {
		if !strings.Contains(got, want) {
			t.Errorf("core: lacks %q:\n%s", want, got)
		}
	}
	got = strings.Join(bindingReport(slots, nil, "none"), "\n")
	for _, want := range []string{"rank 0 not bound: may run on any CPU (--bind-to none)", "rank 2 on node9.invalid: not bound"} {
		if !strings.Contains(got, want) {
			t.Errorf("none: lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "CPUs []") {
		t.Errorf("an unbound rank reported as bound to no CPU:\n%s", got)
	}
}

// --report-bindings through a real job: a line per rank on gorun's
// stderr, with the CPUs the rank was bound to at fork.
func TestReportBindingsJob(t *testing.T) {
	_, stderr, err := runJob(t, "args", Config{NP: 2, Bind: "core", ReportBindings: true, NoTag: true})
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	for r := range 2 {
		if want := fmt.Sprintf("gorun: rank %d bound to CPUs [", r); !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
}

// -H localhost:1 -np 3 is a usage error, as mpirun's, and runs three ranks
// on this machine with --oversubscribe.
func TestOversubscribeRun(t *testing.T) {
	cfg := Config{NP: 3, Hosts: []Host{{Name: "localhost", Slots: 1}}}
	if _, _, err := runJob(t, "env", cfg); !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), "--oversubscribe") {
		t.Errorf("3 ranks on 1 slot: %v, want a usage error that names --oversubscribe", err)
	}
	cfg.Oversubscribe = true
	out, stderr, err := runJob(t, "env", cfg)
	if err != nil {
		t.Fatalf("--oversubscribe: %v\n%s", err, stderr)
	}
	for r, lines := range rankLines(t, out) {
		if !slices.Contains(lines, EnvLocalSize+"=3") || !slices.Contains(lines, fmt.Sprintf("%s=%d", EnvLocalRank, r)) {
			t.Errorf("rank %d is not local rank %d of 3:\n%s", r, r, strings.Join(lines, "\n"))
		}
	}
	if n := len(rankLines(t, out)); n != 3 {
		t.Errorf("%d ranks ran, want 3", n)
	}
}

// A hostfile's max_slots lets a job take more ranks than slots without
// --oversubscribe, and no more than max_slots: two ranks run on
// "localhost slots=1 max_slots=2", three are a usage error naming it.
func TestMaxSlotsRun(t *testing.T) {
	hosts, err := ParseHostfile(strings.NewReader("localhost slots=1 max_slots=2\n"))
	if err != nil {
		t.Fatal(err)
	}
	out, stderr, err := runJob(t, "env", Config{NP: 2, Hosts: hosts})
	if err != nil {
		t.Fatalf("2 ranks on slots=1 max_slots=2: %v\n%s", err, stderr)
	}
	if n := len(rankLines(t, out)); n != 2 {
		t.Errorf("%d ranks ran, want 2", n)
	}
	_, _, err = runJob(t, "env", Config{NP: 3, Hosts: hosts, Oversubscribe: true})
	if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), "localhost max_slots=2") {
		t.Errorf("3 ranks on max_slots=2 with --oversubscribe: %v, want a usage error naming localhost max_slots=2", err)
	}
}

// Hosts given through Config, not parsed from -H or --hostfile, are held
// to the same bounds: MaxSlots below Slots is a usage error, as the
// hostfile's max_slots below slots is, and NPerNode caps every host, as
// --npernode does with -H. Both ran three ranks on the host before.
func TestHostsConfigBounds(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		err  string // in the usage error
	}{
		{"MaxSlots below Slots", Config{NP: 3, Hosts: []Host{{Name: "localhost", Slots: 3, MaxSlots: 2}}}, "MaxSlots 2 is less than its 3 Slots"},
		{"NPerNode", Config{NP: 3, Hosts: []Host{{Name: "localhost", Slots: 4}}, NPerNode: 2}, "at most 2 ranks with --npernode 2"},
		{"NPerNode, oversubscribed", Config{NP: 3, Hosts: []Host{{Name: "localhost", Slots: 4}}, NPerNode: 2, Oversubscribe: true}, "at most 2 ranks with --npernode 2"},
		{"NPerNode below MaxSlots", Config{NP: 3, Hosts: []Host{{Name: "localhost", Slots: 1, MaxSlots: 4}}, NPerNode: 2}, "at most 2 ranks with --npernode 2"},
		{"no Slots", Config{NP: 1, Hosts: []Host{{Name: "localhost"}}}, "Slots 0 is not in [1,"},
		{"negative MaxSlots", Config{NP: 1, Hosts: []Host{{Name: "localhost", Slots: 1, MaxSlots: -1}}}, "MaxSlots -1 is not in [0,"},
	} {
		_, stderr, err := runJob(t, "env", tc.cfg)
		if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: %v, want a usage error with %q\n%s", tc.name, err, tc.err, stderr)
		}
	}
	// Within the bounds, the job runs.
	out, stderr, err := runJob(t, "env", Config{NP: 2, Hosts: []Host{{Name: "localhost", Slots: 1, MaxSlots: 4}}, NPerNode: 2})
	if err != nil {
		t.Fatalf("2 ranks, max_slots 4, --npernode 2: %v\n%s", err, stderr)
	}
	if n := len(rankLines(t, out)); n != 2 {
		t.Errorf("%d ranks ran, want 2", n)
	}
}
