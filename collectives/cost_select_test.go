package collectives

import (
	"fmt"
	"math/bits"
	"strings"
	"testing"
)

// selectRanks are the rank counts TestCostSelect checks: every count to
// 64, then the sizes where power-of-two arithmetic or the tree's shape
// changes, to 4,096.
func selectRanks() []int {
	var ns []int
	for n := 2; n <= 64; n++ {
		ns = append(ns, n)
	}
	return append(ns, 65, 96, 127, 128, 255, 256, 500, 1000, 1024, 2047, 2048, 4095, 4096)
}

// selectExceptions names the entries of Exceptions: a new one must be
// added here, with its measurement in its Why.
var selectExceptions = []string{
	"shm allreduce 2 ranks, a CPU each, above 64 KiB: ring where the model picks rd",
	"shm allreduce 4 ranks on fewer CPUs, above 32 KiB up to 64 KiB: hd where the model picks rd",
	"tcp allreduce 4-16 ranks (a power of two) on fewer CPUs, up to 2 MiB: hd where the model picks ring",
	"shm allreduce 4 ranks on fewer CPUs, above 1 MiB up to 2 MiB: ring where the model picks rd",
	"shm reducescatter 4 ranks on fewer CPUs, blocks above 1 KiB up to 8 KiB: ring where the model picks rd",
	"mem allreduce 4 ranks on fewer CPUs, above 256 KiB: ring where the model picks hd",
	"shm allgather 4 ranks on fewer CPUs, blocks above 8 MiB: ring where the model picks bruck",
	"tcp allgather 3 ranks on fewer CPUs, blocks above 1 MiB: ring where the model picks bruck",
	"tcp allgather 4 ranks on fewer CPUs, blocks above 8 MiB: ring where the model picks bruck",
	"shm allgather 6-8 ranks on fewer CPUs, blocks above 8 MiB: ring where the model picks bruck",
	"tcp allgather 6-8 ranks on fewer CPUs, blocks above 8 MiB: ring where the model picks bruck",
	"net allgather 3 hosts and more, a CPU per rank, blocks above 8 MiB: ring where the model picks bruck",
	"net allreduce 4 hosts, a CPU per rank, above 64 KiB up to 256 KiB: hd where the model picks rd",
}

// TestCostSelect: the table comm uses (TableFor) is the model's choice at
// every cell: 2 to 4,096 ranks, 8 B to 64 MiB, each collective with more
// than one algorithm, each provider (verbs takes tcp's constants; net, the
// links between hosts, counts one CPU per rank whatever the caller says),
// one CPU per rank and 2 CPUs shared. The model's choice is recomputed
// here from Cost.Best and Estimate: going up the sizes from 1 byte, Best,
// unless the choice of the size below is predicted within CostTie of it.
// Where an entry of Exceptions applies (in the CPU regime it was measured
// in: Exception.Shared) the table holds its algorithm instead, and each
// entry must change at least one cell. A size between
// powers of two takes the next power's choice. With -v it logs where the
// choice changes, per provider, collective and rank count.
func TestCostSelect(t *testing.T) {
	if len(Exceptions) != len(selectExceptions) {
		t.Fatalf("%d exceptions in Exceptions, %d listed in selectExceptions: list each, with its measurement", len(Exceptions), len(selectExceptions))
	}
	ranks := selectRanks()
	if testing.Short() {
		ranks = []int{2, 3, 4, 5, 8, 16, 17, 64, 127, 1024, 4096}
	}
	used := make([]int, len(Exceptions))
	cells := 0
	for _, p := range []string{"mem", "shm", "tcp", "verbs", netProvider} {
		k, ok := CostOf(p)
		if !ok {
			k, _ = CostOf("tcp")
		}
		for c := range Collective(numCollectives) {
			if len(Algos(c)) < 2 {
				continue
			}
			for _, cpus := range []int{0, 2} {
				for _, n := range ranks {
					tab := TableFor(p, n, cpus)
					mc := modelCPUs(p, cpus) // the CPUs the model counts
					prev := Auto
					var changes []string
					for i := range 27 { // 1 B to 64 MiB
						b := 1 << i
						best, bt := k.Best(c, n, mc, b)
						model := best
						if prev != Auto && k.Estimate(c, prev, n, b).Time(n, mc) <= CostTie*bt {
							model = prev
						}
						if model != prev {
							changes = append(changes, fmt.Sprintf("%s from %s", model, sizeName(b)))
						}
						prev = model
						want := model
						for j, e := range Exceptions {
							if e.Provider == p && e.Coll == c && e.Shared == (mc > 0 && mc < n) && n >= e.MinRanks && n <= e.MaxRanks &&
								(!e.PowerOfTwo || bits.OnesCount(uint(n)) == 1) && b > e.MinBytes && b <= e.MaxBytes &&
								(e.Model == Auto || e.Model == model) {
								want = e.Algo
								if want != model {
									used[j]++
								}
								break
							}
						}
						if b < 8 {
							continue
						}
						cells++
						if got := tab.Algo(c, b); got != want {
							t.Errorf("%s %s %d ranks, %d CPUs, %s: table %s, model %s", p, c, n, cpus, sizeName(b), got, want)
						}
						if b > 8 {
							if got := tab.Algo(c, b/2+1); got != want {
								t.Errorf("%s %s %d ranks, %d CPUs, %d bytes: table %s, want %s (the choice at %s)", p, c, n, cpus, b/2+1, got, want, sizeName(b))
							}
						}
						if n <= 16 && cpus == 0 {
							if got := Choose(p, c, n, cpus, b); got != want {
								t.Errorf("%s %s %d ranks, %d CPUs, %s: Choose %s, model %s", p, c, n, cpus, sizeName(b), got, want)
							}
						}
					}
					if testing.Verbose() && cpus == 0 && (n <= 4 || n == 8 || n == 16 || n == 64 || n == 1024 || n == 4096) {
						t.Logf("%s %s %d ranks: %s", p, c, n, strings.Join(changes, ", "))
					}
				}
			}
		}
	}
	for j, e := range Exceptions {
		if used[j] == 0 {
			t.Errorf("exception %q (%s %s) changes no cell: the model agrees; remove it", selectExceptions[j], e.Provider, e.Coll)
		}
	}
	t.Logf("%d cells; exceptions changed %v of them", cells, used)
}

// TestExceptionRegime: an exception applies in the CPU regime it was
// measured in only. shm's 4-rank allgather of 16 MiB blocks, measured with
// 4 processes on 2 CPUs, takes the ring there and the model's Bruck with a
// CPU per rank; the shm pair's ring above 64 KiB, measured with a CPU
// each, holds there and not for 2 ranks on one CPU.
func TestExceptionRegime(t *testing.T) {
	for _, tc := range []struct {
		p           string
		c           Collective
		n, cpus, b  int
		want, model Algo
	}{
		{"shm", AllGather, 4, 2, 16 << 20, Ring, Bruck},
		{"shm", AllGather, 4, 0, 16 << 20, Bruck, Bruck},
		{"shm", AllReduce, 2, 0, 1 << 20, Ring, RecDoubling},
		{"shm", AllReduce, 2, 2, 1 << 20, Ring, RecDoubling}, // 2 CPUs for 2 ranks: a CPU each
		{"shm", AllReduce, 2, 1, 1 << 20, RecDoubling, RecDoubling},
		{netProvider, AllReduce, 4, 2, 128 << 10, HalvingDoubling, RecDoubling}, // between hosts: a CPU per rank whatever the caller says
		{netProvider, AllReduce, 4, 0, 64 << 10, RecDoubling, RecDoubling},
	} {
		if m := ModelChoice(tc.p, tc.c, tc.n, tc.cpus, tc.b); m != tc.model {
			t.Fatalf("%s %s %d ranks on %d CPUs, %s: the model picks %s, not %s: the case tests nothing", tc.p, tc.c, tc.n, tc.cpus, sizeName(tc.b), m, tc.model)
		}
		if got := TableFor(tc.p, tc.n, tc.cpus).Algo(tc.c, tc.b); got != tc.want {
			t.Errorf("%s %s %d ranks on %d CPUs, %s: table %s, want %s", tc.p, tc.c, tc.n, tc.cpus, sizeName(tc.b), got, tc.want)
		}
		if got := Choose(tc.p, tc.c, tc.n, tc.cpus, tc.b); got != tc.want {
			t.Errorf("%s %s %d ranks on %d CPUs, %s: Choose %s, want %s", tc.p, tc.c, tc.n, tc.cpus, sizeName(tc.b), got, tc.want)
		}
	}
}

// TestTableForCached: TableFor returns the same table for the same
// key, and a lookup allocates nothing.
func TestTableForCached(t *testing.T) {
	a, b := TableFor("tcp", 6, 2), TableFor("tcp", 6, 2)
	if a != b {
		t.Fatal("TableFor built the table twice")
	}
	if TableFor("shm", 6, 2) == a || TableFor("tcp", 6, 0) == a || TableFor("tcp", 7, 2) == a {
		t.Fatal("TableFor returned another key's table")
	}
	if n := testing.AllocsPerRun(100, func() {
		TableFor("tcp", 6, 2).Algo(AllReduce, 1<<20)
	}); n != 0 {
		t.Errorf("a lookup allocates %v times", n)
	}
}

// sizeName prints a power-of-two size in B, KiB or MiB.
func sizeName(b int) string {
	switch {
	case b >= 1<<20:
		return fmt.Sprintf("%dMiB", b>>20)
	case b >= 1<<10:
		return fmt.Sprintf("%dKiB", b>>10)
	}
	return fmt.Sprintf("%dB", b)
}

// TestTableTreeMeasured pins the double tree's table cells that A/B runs
// measured (README, the double tree's factor; 2026-11-30, the EPYC, 2
// CPUs, allreduce_perf with a barrier before each call, medians of 3-6
// rounds, out of place): where the tree was faster than the choice under
// allReduceFactor's old tree factor (1.40), the table takes it; where a
// lower factor (1.15) would have moved a cell to what the runs showed
// slower, it keeps the faster. A change of the model that moves one of
// these goes against a measurement, and must measure it again.
func TestTableTreeMeasured(t *testing.T) {
	for _, tc := range []struct {
		p    string
		n, b int
		want Algo
		why  string
	}{
		{"mem", 8, 64 << 10, Tree, "tree 67.8 us, hd 83.8"},
		{"mem", 8, 128 << 10, Tree, "tree 110, hd 132"},
		{"mem", 16, 16 << 10, Tree, "tree 96, rd 146"},
		{"mem", 16, 128 << 10, Tree, "tree 354, hd 479"},
		{"mem", 32, 16 << 10, Tree, "tree 345, rd 545"},
		{"mem", 64, 16 << 10, Tree, "tree 848, rd 1,758"},
		{"mem", 64, 128 << 10, Tree, "tree 4,438, hd 5,786"},
		{"mem", 64, 256 << 10, Tree, "tree 8,941, hd 10,374"},
		{"shm", 16, 128 << 10, Tree, "tree 782, rd 1,271"},
		{"shm", 32, 64 << 10, Tree, "tree 1,348, rd 1,579"},
		{"tcp", 16, 64 << 10, Tree, "tree 1,677, rd 2,137"},
		{"tcp", 32, 256 << 10, Tree, "tree 10,541, hd 14,952"},
		{"mem", 4, 32 << 10, RecDoubling, "rd 16.8, tree 19.3"},
		{"mem", 4, 256 << 10, HalvingDoubling, "hd 72.6, tree 78.0, ring 93.4"},
		{"tcp", 16, 256 << 10, HalvingDoubling, "hd 3,838, tree 4,338"},
	} {
		if got := TableFor(tc.p, tc.n, 2).Algo(AllReduce, tc.b); got != tc.want {
			t.Errorf("%s allreduce, %d ranks on 2 CPUs, %s: the table takes %s, not %s (measured: %s)", tc.p, tc.n, sizeName(tc.b), got, tc.want, tc.why)
		}
	}
}
