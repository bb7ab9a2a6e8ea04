package collectives

// The selection table, derived from the cost model (cost.go).
//
// For a communicator of size ranks sharing cpus CPUs (0: one CPU per
// rank) on one provider, the algorithm of a collective moving bytes is
// the model's: the algorithm it predicts fastest (Cost.Best), with one
// rule for near ties (hysteresis): going up the sizes, the choice of the
// size below stays while the model predicts it within CostTie of the
// fastest. The model's error (README, cost model) is larger than the gains
// it predicts there, and a choice that flaps between neighbouring sizes is
// measured nowhere. Then the measured exceptions (Exceptions) apply, each
// in the CPU regime it was measured in (Exception.Shared); they are the
// only departures from the model. Between hosts the constants are
// the network's ("net", cost_net.go), with one CPU per rank (modelCPUs).
// A Tuning (tuning.go) derives the tables from a machine's own fit
// instead of cost.go's constants.
//
// Sizes are classed by the next power of two: a buffer of bytes takes the
// choice at the smallest 2^k ≥ bytes. A Table holds the choice for every
// class and collective, so a lookup is an index; TableFor builds one per
// (provider, size, cpus) on first use and keeps it for the process.

import (
	"math/bits"
	"sync"
	"sync/atomic"
)

// CostTie is the ratio of predicted times under which the table keeps
// the choice of the size below rather than switch to the fastest.
const CostTie = 1.1

// tableClasses is the number of size classes: up to 2^40 bytes; larger
// buffers take the last class's choice.
const tableClasses = 41

// sizeClass is the smallest k with bytes ≤ 2^k, at most tableClasses-1.
func sizeClass(bytes int) int {
	if bytes <= 1 {
		return 0
	}
	return min(bits.Len(uint(bytes-1)), tableClasses-1)
}

// Table is the algorithm choice of every collective and size class for
// one provider, rank count and CPU count. It is immutable once built.
type Table struct {
	provider   string
	size, cpus int
	tuning     uint64 // the Tuning's Sum (0: cost.go's)
	algo       [NumCollectives][tableClasses]Algo
}

// Algo is the table's algorithm for c moving bytes (as Select takes
// them). It allocates nothing and looks nothing up but an array.
func (t *Table) Algo(c Collective, bytes int) Algo {
	return t.algo[c][sizeClass(bytes)]
}

// NewTable derives the table for size ranks sharing cpus CPUs (0: one CPU
// per rank) linked by provider (mem, shm, tcp, verbs; see selectCost), or
// for "net", ranks on several hosts, the table between hosts (cost_net.go;
// one CPU per rank whatever cpus says: modelCPUs).
func NewTable(provider string, size, cpus int) *Table {
	return newTable(nil, provider, size, cpus)
}

// newTable is NewTable with tu's constants, factors, rules and
// exceptions flag (nil: cost.go's).
func newTable(tu *Tuning, provider string, size, cpus int) *Table {
	t := &Table{provider: provider, size: size, cpus: cpus, tuning: tu.Sum()}
	k := tu.cost(provider)
	exceptions := tu == nil || tu.exceptions
	cpus = modelCPUs(provider, cpus)
	for c := range Collective(numCollectives) {
		model := Auto
		for i := range tableClasses {
			model = modelChoice(k, c, size, cpus, 1<<i, model)
			t.algo[c][i] = model
			if a := tu.rule(provider, c, size, cpus, 1<<i); a != Auto {
				t.algo[c][i] = a
				continue
			}
			if !exceptions {
				continue
			}
			if e := exceptionFor(provider, c, size, cpus, 1<<i, model); e != nil {
				t.algo[c][i] = e.Algo
			}
		}
	}
	return t
}

// Choose is the derived choice for one cell: the model's (ModelChoice)
// unless an entry of Exceptions applies. It computes the model's
// predictions at every size up to bytes' class; comm looks the answer up
// in a Table instead.
func Choose(provider string, c Collective, size, cpus, bytes int) Algo {
	a := ModelChoice(provider, c, size, cpus, bytes)
	if e := exceptionFor(provider, c, size, modelCPUs(provider, cpus), 1<<sizeClass(bytes), a); e != nil {
		return e.Algo
	}
	return a
}

// ModelChoice is the model's choice for c without the exceptions: Best at
// each size class from 1 byte up to bytes' class, the choice of the class
// below kept while it is predicted within CostTie of the fastest.
func ModelChoice(provider string, c Collective, size, cpus, bytes int) Algo {
	k := selectCost(provider)
	cpus = modelCPUs(provider, cpus)
	a := Auto
	for i := range sizeClass(bytes) + 1 {
		a = modelChoice(k, c, size, cpus, 1<<i, a)
	}
	return a
}

// modelChoice is the model's choice at bytes where it chose prev at the
// size class below (Auto: none).
func modelChoice(k Cost, c Collective, size, cpus, bytes int, prev Algo) Algo {
	algos := Algos(c)
	if len(algos) == 1 || size < 2 {
		return algos[0]
	}
	best, bt := k.Best(c, size, cpus, bytes)
	if prev != Auto && prev != best && k.Estimate(c, prev, size, bytes).Time(size, cpus) <= CostTie*bt {
		return prev
	}
	return best
}

// modelCPUs is the CPUs the model counts for ranks on provider where the
// caller says cpus: between hosts ("net") one per rank (0), as the
// constants there were fitted (one rank per host); cpus otherwise.
func modelCPUs(provider string, cpus int) int {
	if provider == netProvider {
		return 0
	}
	return cpus
}

// selectCost is the constants the table uses for provider: its own
// fitted ones, or tcp's for a provider without them (verbs, which this
// machine cannot measure, and any other): the slowest provider fitted on
// one host, whose large per-message cost favours the fewest dependent
// steps.
func selectCost(provider string) Cost {
	if k, ok := costs[provider]; ok {
		return k
	}
	return costs["tcp"]
}

// tables caches the tables built by TableFor (a world of n ranks in one
// process makes n communicators of one key): open addressing over a fixed
// array of atomic pointers, so that a lookup neither allocates nor takes a
// lock; a miss builds the table under tablesMu. Tables are never changed
// once published. A communicator keeps its table (comm's Comm.table), so
// this is looked up once per communicator, not per call.
var (
	tables   [256]atomic.Pointer[Table]
	tablesMu sync.Mutex
)

// tableProbes is how many slots a key may occupy from its hash.
const tableProbes = 8

// TableFor returns the table for size ranks sharing cpus CPUs (0: one per
// rank) on provider, built on first use and kept for the process.
func TableFor(provider string, size, cpus int) *Table {
	return tableFor(nil, provider, size, cpus)
}

// tableFor is TableFor with tu's constants (Tuning.Table).
func tableFor(tu *Tuning, provider string, size, cpus int) *Table {
	sum := tu.Sum()
	h := tableHash(provider, size, cpus) ^ uint(sum)
	for i := range uint(tableProbes) {
		t := tables[(h+i)%uint(len(tables))].Load()
		if t == nil {
			break
		}
		if t.size == size && t.cpus == cpus && t.tuning == sum && t.provider == provider {
			return t
		}
	}
	tablesMu.Lock()
	defer tablesMu.Unlock()
	slot := h % uint(len(tables)) // evicted if every probe is taken
	for i := range uint(tableProbes) {
		s := (h + i) % uint(len(tables))
		t := tables[s].Load()
		if t == nil {
			slot = s
			break
		}
		if t.size == size && t.cpus == cpus && t.tuning == sum && t.provider == provider {
			return t // built while this call waited
		}
	}
	t := newTable(tu, provider, size, cpus)
	tables[slot].Store(t)
	return t
}

func tableHash(provider string, size, cpus int) uint {
	h := uint(size)*0x9E3779B1 ^ uint(cpus)*0x85EBCA6B
	for i := range len(provider) {
		h = h*31 + uint(provider[i])
	}
	return h ^ h>>16
}
