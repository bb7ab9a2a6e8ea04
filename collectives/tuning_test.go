package collectives

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tuningJSON is a TuningFile for provider with k's constants.
func tuningJSON(t *testing.T, provider string, k Cost, extra map[string]any) []byte {
	t.Helper()
	m := map[string]any{"costs": map[string]Cost{provider: k}}
	for key, v := range extra {
		m[key] = v
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestParseTuningRefuses: a file no fit writes is refused, naming what is
// wrong; nothing is interned from it.
func TestParseTuningRefuses(t *testing.T) {
	good := costs["tcp"]
	neg := good
	neg.Beta = -1
	zero := good
	zero.Cache = 0
	for _, tc := range []struct {
		name, file, want string
	}{
		{"not json", "alpha=1", "not a cost tuning file"},
		{"empty", "{}", "sets nothing"},
		{"two values", `{"exceptions": false} {}`, "more than one"},
		{"unknown field", `{"costs": {"tcp": {"Alpah": 1}}}`, "Alpah"},
		{"unknown provider", string(tuningJSON(t, "ib", good, nil)), `unknown provider "ib"`},
		{"negative beta", string(tuningJSON(t, "tcp", neg, nil)), "costs.tcp: Beta: -1"},
		{"no cache", string(tuningJSON(t, "shm", zero, nil)), "costs.shm: Cache: 0"},
		{"missing alpha", `{"costs": {"tcp": {"Beta": 1e-10, "Cache": 1e6}}}`, "costs.tcp: Alpha: 0"},
		{"bad factor", string(tuningJSON(t, "tcp", good, map[string]any{"allreduce_factors": map[string]float64{"tree": 0}})), "allreduce_factors.tree"},
		{"rule's provider", `{"rules": [{"provider": "ib", "collective": "allreduce", "algo": "ring"}]}`, `rules[0]: unknown provider "ib"`},
		{"rule's collective", `{"rules": [{"provider": "tcp", "collective": "allsum", "algo": "ring"}]}`, "rules[0]: collective"},
		{"rule's algorithm", `{"rules": [{"provider": "tcp", "collective": "broadcast", "algo": "hd"}]}`, `rules[0]: broadcast has no algorithm "hd"`},
		{"rule's ranks", `{"rules": [{"provider": "tcp", "collective": "allreduce", "algo": "ring", "min_ranks": 8, "max_ranks": 4}]}`, "rules[0]: ranks 8..4"},
		{"rule's bytes", `{"rules": [{"provider": "tcp", "collective": "allreduce", "algo": "ring", "min_bytes": 4096, "max_bytes": 4096}]}`, "rules[0]: bytes above 4096 to 4096"},
		{"factor of no allreduce", string(tuningJSON(t, "tcp", good, map[string]any{"allreduce_factors": map[string]float64{"chain": 1}})), `"chain" is no allreduce algorithm`},
	} {
		tu, err := ParseTuning([]byte(tc.file))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, %v; want an error containing %q", tc.name, tu, err, tc.want)
		}
	}
	if _, err := ReadTuning(filepath.Join(t.TempDir(), "none.json")); !os.IsNotExist(err) {
		t.Errorf("a missing file: %v, want not-exist", err)
	}
}

// TestTuningTables: a tuning's tables are the model's with its constants
// where it names the provider and cost.go's elsewhere; its factors apply;
// exceptions false leaves the model's choice where an exception departs
// from it; the same content is one Tuning whatever its spacing or comment.
func TestTuningTables(t *testing.T) {
	// mem with a message 1000 times dearer: the fewest messages win.
	k := costs["mem"]
	k.Alpha *= 1000
	k.Latency *= 1000
	tu, err := ParseTuning(tuningJSON(t, "mem", k, map[string]any{"comment": "a"}))
	if err != nil {
		t.Fatal(err)
	}
	same, err := ParseTuning(tuningJSON(t, "mem", k, map[string]any{"comment": "another host's words"}))
	if err != nil || same != tu || tu.Sum() == 0 {
		t.Fatalf("the same constants: %p (sum %x) and %p, %v; want one Tuning with a sum", tu, tu.Sum(), same, err)
	}
	if (*Tuning)(nil).Sum() != 0 || (*Tuning)(nil).Table("mem", 8, 0) != TableFor("mem", 8, 0) {
		t.Fatal("a nil Tuning is not cost.go's")
	}
	mine, builtin := tu.Table("mem", 8, 0), TableFor("mem", 8, 0)
	if mine == builtin || tu.Table("mem", 8, 0) != mine {
		t.Fatal("the tuned table is cost.go's, or not kept")
	}
	differ := 0
	for i := range tableClasses {
		bytes := 1 << i
		want, _ := k.Best(AllReduce, 8, 0, bytes)
		if i > 0 {
			want = modelChoice(k, AllReduce, 8, 0, bytes, mine.Algo(AllReduce, bytes/2))
		}
		if e := exceptionFor("mem", AllReduce, 8, 0, bytes, want); e != nil {
			want = e.Algo
		}
		if got := mine.Algo(AllReduce, bytes); got != want {
			t.Fatalf("%d B: tuned table %s, its model %s", bytes, got, want)
		}
		if mine.Algo(AllReduce, bytes) != builtin.Algo(AllReduce, bytes) {
			differ++
		}
	}
	if differ == 0 {
		t.Fatal("a message 1000 times dearer changed no allreduce choice at 8 ranks")
	}
	if a, b := tu.Table("shm", 8, 0), TableFor("shm", 8, 0); a.algo != b.algo {
		t.Error("shm, which the file leaves out, is not cost.go's")
	}

	// Factors: a recursive doubling 100 times dearer is never chosen.
	slow, err := ParseTuning(tuningJSON(t, "mem", costs["mem"], map[string]any{"allreduce_factors": map[string]float64{"rd": 100}}))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{2, 4, 8, 16} {
		for i := range 27 {
			if a := slow.Table("mem", n, 0).Algo(AllReduce, 1<<i); a == RecDoubling {
				t.Fatalf("%d ranks, %d B: rd 100 times dearer still chosen", n, 1<<i)
			}
		}
	}

	// Exceptions off: every cell is the model's.
	var e *Exception
	for i := range Exceptions {
		if Exceptions[i].Provider == "tcp" {
			e = &Exceptions[i]
			break
		}
	}
	if e == nil {
		t.Skip("no tcp exception to drop")
	}
	cpus := 0
	if e.Shared {
		cpus = 2
	}
	n, bytes := e.MinRanks, e.MaxBytes
	off, err := ParseTuning([]byte(`{"exceptions": false}`))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := TableFor("tcp", n, cpus).Algo(e.Coll, bytes), e.Algo; got != want {
		t.Fatalf("cost.go's table at the exception (%s, %d ranks, %d B): %s, want %s", e.Coll, n, bytes, got, want)
	}
	if ModelChoice("tcp", e.Coll, n, cpus, bytes) == e.Algo {
		t.Fatalf("the exception (%s, %d ranks, %d B) is the model's own choice: nothing to drop", e.Coll, n, bytes)
	}
	if got, want := off.Table("tcp", n, cpus).Algo(e.Coll, bytes), ModelChoice("tcp", e.Coll, n, cpus, bytes); got != want {
		t.Fatalf("exceptions off at %s, %d ranks, %d B: %s, want the model's %s", e.Coll, n, bytes, got, want)
	}
}

// xeonDir holds a machine's own points and the TuningFile fitted on them
// (README, Tuning to a machine): an Intel Xeon's 2 vCPUs, 2026-11-30.
const xeonDir = "testdata/xeon-2026-11-30/"

// TestTuningFileOnItsPoints: the tuning file fitted on the Xeon's points,
// read back, predicts them as the fit did (264 of the 311 check points
// within 30%, the README's figure; 263 since the double tree over 2 ranks
// takes the ring's pieces, which the model counts and these points,
// measured before, do not have), where cost.go's constants predict far
// fewer: the file's constants reach the estimates whole.
func TestTuningFileOnItsPoints(t *testing.T) {
	tu, err := ReadTuning(xeonDir + "tuning.json")
	if err != nil {
		t.Fatal(err)
	}
	pts, err := readCostFiles(xeonDir + "mem.csv," + xeonDir + "shm.csv," + xeonDir + "tcp.csv")
	if err != nil {
		t.Fatal(err)
	}
	pts = placedBy(pts, "any")
	ks := map[string]Cost{}
	for _, p := range []string{"mem", "shm", "tcp"} {
		ks[p] = tu.cost(p)
	}
	own := costErrors(ks, &tu.factor, pts, false, nil)
	builtin := costErrors(costs, &allReduceFactor, pts, false, nil)
	all := func(gs []*costGroup) *costGroup { return gs[len(gs)-1] }
	if got := all(own).within(0.3); got != 263 || len(all(own).errs) != 311 {
		t.Errorf("the file's constants: %d of %d check points within 30%%, want 263 of 311", got, len(all(own).errs))
	}
	if got := all(builtin).within(0.3); got >= 263 {
		t.Errorf("cost.go's constants: %d within 30%% on the Xeon's points, as many as its own fit", got)
	}
}

// TestTuningRules: a file's rules set the table's algorithm where they
// apply (provider, collective, ranks, bytes, CPU regime), before the
// measured exceptions, the first that applies winning; elsewhere the
// table is cost.go's.
func TestTuningRules(t *testing.T) {
	tu, err := ParseTuning([]byte(`{"rules": [
		{"provider": "tcp", "collective": "allreduce", "min_ranks": 2, "max_ranks": 2, "min_bytes": 1048576, "algo": "tree"},
		{"provider": "tcp", "collective": "allreduce", "min_ranks": 2, "max_ranks": 2, "algo": "ring"},
		{"provider": "shm", "collective": "broadcast", "min_ranks": 4, "power_of_two": true, "shared": true, "algo": "chain"},
		{"provider": "tcp", "collective": "allreduce", "min_ranks": 4, "max_ranks": 16, "power_of_two": true, "shared": true, "max_bytes": 2097152, "algo": "rd"}
	]}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		provider   string
		c          Collective
		size, cpus int
		bytes      int
		want       Algo // Auto: cost.go's table
	}{
		{"tcp", AllReduce, 2, 0, 2 << 20, Tree},        // the first rule
		{"tcp", AllReduce, 2, 0, 1 << 20, Ring},        // the second: the first starts above 1 MiB
		{"tcp", AllReduce, 2, 0, 8, Ring},              // the second, at any size
		{"tcp", AllReduce, 3, 2, 1 << 20, Auto},        // 3 ranks: no rule
		{"shm", AllReduce, 2, 0, 1 << 20, Auto},        // another provider
		{"tcp", Broadcast, 2, 0, 1 << 20, Auto},        // another collective
		{"shm", Broadcast, 4, 2, 1 << 20, Chain},       // shared CPUs, a power of two
		{"shm", Broadcast, 8, 2, 8, Chain},             // no upper bound on ranks
		{"shm", Broadcast, 4, 0, 1 << 20, Auto},        // a CPU each
		{"shm", Broadcast, 6, 2, 1 << 20, Auto},        // not a power of two
		{"tcp", AllReduce, 4, 2, 1 << 20, RecDoubling}, // where cost.go's exception takes hd
		{"tcp", AllReduce, 4, 2, 4 << 20, Auto},        // above the rule's bytes
	} {
		want := tc.want
		if want == Auto {
			want = TableFor(tc.provider, tc.size, tc.cpus).Algo(tc.c, tc.bytes)
		}
		if got := tu.Table(tc.provider, tc.size, tc.cpus).Algo(tc.c, tc.bytes); got != want {
			t.Errorf("%s %s, %d ranks on %d CPUs, %d B: %s, want %s", tc.provider, tc.c, tc.size, tc.cpus, tc.bytes, got, want)
		}
	}
	if got := TableFor("tcp", 4, 2).Algo(AllReduce, 1<<20); got != HalvingDoubling {
		t.Fatalf("cost.go's table at tcp, 4 ranks on 2 CPUs, 1 MiB: %s, want the exception's hd (the rule's case checks nothing)", got)
	}
}
