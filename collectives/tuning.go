package collectives

// A machine's own fit of the cost model.
//
// cost.go's constants were fitted on the machine the project measured
// (README, cost model); another machine's cache, cores and network give
// other constants, and so another selection table. A Tuning carries the
// constants a fit on the machine that runs the job gave (TuningFile, as
// collectives' TestCostPoints writes it with GORUN_COST_OUT), and the
// tables it derives replace the built-in ones for the providers it names,
// as Open MPI's coll_tuned_dynamic_rules_filename replaces its fixed
// decisions. comm reads one from GORUN_COST_FILE, and every rank of a
// communicator must use the same (comm checks Sum at Init).

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"maps"
	"math"
	"os"
	"slices"
	"sync"
)

// TuningFile is the JSON form of a Tuning.
type TuningFile struct {
	// Comment says where the constants come from (the host, the date,
	// the command); it is not read.
	Comment string `json:"comment,omitempty"`
	// Costs are the constants per provider ("mem", "shm", "tcp",
	// "verbs", "net"), in Cost's field names. A provider left out keeps
	// cost.go's; verbs without its own takes the file's tcp where it has
	// one (as the built-in table does).
	Costs map[string]Cost `json:"costs"`
	// AllReduceFactors scale each allreduce algorithm's prediction
	// ("ring", "tree", "rd", "hd"; allReduceFactor). Left out: cost.go's.
	AllReduceFactors map[string]float64 `json:"allreduce_factors,omitempty"`
	// Exceptions false drops the measured exceptions (Exceptions), which
	// were measured on the project's machine: the table is the model's
	// alone. Left out: they apply.
	Exceptions *bool `json:"exceptions,omitempty"`
	// Rules are the machine's own exceptions: where one applies, the
	// table takes its algorithm whatever the model says, before the
	// measured Exceptions. The first that applies wins.
	Rules []TuningRule `json:"rules,omitempty"`
}

// TuningRule is an exception of a TuningFile: the algorithm Algo for
// Collective on Provider where the communicator has MinRanks..MaxRanks
// ranks (0: no bound; PowerOfTwo: powers of two only) and MinBytes <
// bytes ≤ MaxBytes (0: no bound), bytes as Select takes them; Shared, if
// set, limits it to ranks that take turns on shared CPUs (true) or have a
// CPU each (false), as Exception.Shared. Why says what measured it.
type TuningRule struct {
	Provider   string `json:"provider"`
	Collective string `json:"collective"`
	MinRanks   int    `json:"min_ranks,omitempty"`
	MaxRanks   int    `json:"max_ranks,omitempty"`
	PowerOfTwo bool   `json:"power_of_two,omitempty"`
	MinBytes   int    `json:"min_bytes,omitempty"`
	MaxBytes   int    `json:"max_bytes,omitempty"`
	Shared     *bool  `json:"shared,omitempty"`
	Algo       string `json:"algo"`
	Why        string `json:"why,omitempty"`
}

// check returns tr as the Exceptions it stands for (two, one per CPU
// regime, where Shared is not set), or what is wrong with it.
func (tr TuningRule) check() ([]Exception, error) {
	if !slices.Contains(tuningProviders, tr.Provider) {
		return nil, fmt.Errorf("unknown provider %q (want one of %v)", tr.Provider, tuningProviders)
	}
	c, err := ParseCollective(tr.Collective)
	if err != nil {
		return nil, fmt.Errorf("collective: %w", err)
	}
	a, err := ParseAlgo(tr.Algo)
	if err != nil || a == Auto || !Supports(c, a) {
		return nil, fmt.Errorf("%s has no algorithm %q (want one of %v)", c, tr.Algo, Algos(c))
	}
	e := Exception{Provider: tr.Provider, Coll: c, MinRanks: tr.MinRanks, MaxRanks: tr.MaxRanks, PowerOfTwo: tr.PowerOfTwo,
		MinBytes: tr.MinBytes, MaxBytes: tr.MaxBytes, Algo: a, Why: tr.Why}
	if e.MaxRanks == 0 {
		e.MaxRanks = math.MaxInt
	}
	if e.MaxBytes == 0 {
		e.MaxBytes = math.MaxInt
	}
	switch {
	case e.MinRanks < 0 || e.MaxRanks < e.MinRanks:
		return nil, fmt.Errorf("ranks %d..%d: want 0 ≤ min_ranks ≤ max_ranks (0: no bound)", tr.MinRanks, tr.MaxRanks)
	case e.MinBytes < 0 || e.MaxBytes <= e.MinBytes:
		return nil, fmt.Errorf("bytes above %d to %d: want 0 ≤ min_bytes < max_bytes (0: no bound)", tr.MinBytes, tr.MaxBytes)
	}
	if tr.Shared != nil {
		e.Shared = *tr.Shared
		return []Exception{e}, nil
	}
	both := e
	both.Shared = true
	return []Exception{e, both}, nil
}

// Tuning is a parsed, checked TuningFile. A nil *Tuning is cost.go's
// constants with the exceptions.
type Tuning struct {
	costs      map[string]Cost
	factor     [numAlgos]float64
	exceptions bool
	rules      []Exception // the file's rules, before Exceptions
	sum        uint64
}

// tuningProviders are the providers a TuningFile may name.
var tuningProviders = []string{"mem", "shm", "tcp", "verbs", netProvider}

// tunings interns the Tunings parsed so far by their Sum, so that every
// communicator of a process that reads the same file shares its tables
// (TableFor keys them by the Sum).
var (
	tunings   = map[uint64]*Tuning{}
	tuningsMu sync.Mutex
)

// ReadTuning reads and checks the TuningFile at path.
func ReadTuning(path string) (*Tuning, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseTuning(b)
}

// ParseTuning parses and checks a TuningFile: known providers and
// algorithms only, every constant finite and not negative, Alpha, Beta
// and Cache above 0, every factor above 0. The error names the field.
func ParseTuning(b []byte) (*Tuning, error) {
	var f TuningFile
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&f); err != nil {
		return nil, fmt.Errorf("not a cost tuning file: %w", err)
	}
	if d.More() {
		return nil, fmt.Errorf("not a cost tuning file: more than one JSON value")
	}
	if len(f.Costs) == 0 && len(f.AllReduceFactors) == 0 && f.Exceptions == nil && len(f.Rules) == 0 {
		return nil, fmt.Errorf("the file sets nothing (costs, allreduce_factors, exceptions, rules)")
	}
	t := &Tuning{costs: map[string]Cost{}, factor: allReduceFactor, exceptions: f.Exceptions == nil || *f.Exceptions}
	for _, p := range slices.Sorted(maps.Keys(f.Costs)) {
		if !slices.Contains(tuningProviders, p) {
			return nil, fmt.Errorf("costs: unknown provider %q (want one of %v)", p, tuningProviders)
		}
		k := f.Costs[p]
		if err := k.check(); err != nil {
			return nil, fmt.Errorf("costs.%s: %w", p, err)
		}
		t.costs[p] = k
	}
	for _, name := range slices.Sorted(maps.Keys(f.AllReduceFactors)) {
		a, err := ParseAlgo(name)
		if err != nil || a == Auto || !Supports(AllReduce, a) {
			return nil, fmt.Errorf("allreduce_factors: %q is no allreduce algorithm (want one of %v)", name, Algos(AllReduce))
		}
		v := f.AllReduceFactors[name]
		if math.IsNaN(v) || math.IsInf(v, 0) || v <= 0 {
			return nil, fmt.Errorf("allreduce_factors.%s: %v, want a number above 0", name, v)
		}
		t.factor[a] = v
	}
	for i, tr := range f.Rules {
		es, err := tr.check()
		if err != nil {
			return nil, fmt.Errorf("rules[%d]: %w", i, err)
		}
		t.rules = append(t.rules, es...)
	}
	t.sum = t.checksum()
	tuningsMu.Lock()
	defer tuningsMu.Unlock()
	if old, ok := tunings[t.sum]; ok {
		return old, nil
	}
	if len(tunings) < 64 { // a process reads one or a few; never grow without bound
		tunings[t.sum] = t
	}
	return t, nil
}

// check reports the first constant of k that no fit gives.
func (k Cost) check() error {
	for _, f := range []struct {
		name     string
		v        float64
		positive bool
	}{
		{"Alpha", k.Alpha, true}, {"Latency", k.Latency, false}, {"Beta", k.Beta, true}, {"Gamma", k.Gamma, false},
		{"Overhead", k.Overhead, false}, {"Turn", k.Turn, false}, {"Spill", k.Spill, false},
		{"Cache", k.Cache, true}, {"Crowd", k.Crowd, false}, {"Far", k.Far, false},
	} {
		switch {
		case math.IsNaN(f.v) || math.IsInf(f.v, 0) || f.v < 0:
			return fmt.Errorf("%s: %v, want a finite number, not negative", f.name, f.v)
		case f.positive && f.v == 0:
			return fmt.Errorf("%s: 0 (or left out), want a number above 0", f.name)
		}
	}
	return nil
}

// checksum is FNV-1a over t's constants, factors and exceptions flag, in
// a fixed order: two files that say the same give the same sum, whatever
// their spacing, order or comment. Never 0 (cost.go's own).
func (t *Tuning) checksum() uint64 {
	h := fnv.New64a()
	var b []byte
	for _, p := range slices.Sorted(maps.Keys(t.costs)) {
		k := t.costs[p]
		b = append(b, p...)
		for _, v := range []float64{k.Alpha, k.Latency, k.Beta, k.Gamma, k.Overhead, k.Turn, k.Spill, k.Cache, k.Crowd, k.Far} {
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
		}
	}
	for _, v := range t.factor {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
	}
	if t.exceptions {
		b = append(b, 1)
	}
	for _, e := range t.rules {
		b = append(b, e.Provider...)
		for _, v := range []int{int(e.Coll), e.MinRanks, e.MaxRanks, e.MinBytes, e.MaxBytes, int(e.Algo)} {
			b = binary.LittleEndian.AppendUint64(b, uint64(v))
		}
		var flags byte
		if e.PowerOfTwo {
			flags |= 1
		}
		if e.Shared {
			flags |= 2
		}
		b = append(b, flags)
	}
	h.Write(b)
	return max(h.Sum64(), 1)
}

// Sum identifies t's content: ranks that must choose alike compare it.
// 0 for nil (cost.go's constants and the exceptions).
func (t *Tuning) Sum() uint64 {
	if t == nil {
		return 0
	}
	return t.sum
}

// Providers lists the providers whose constants t sets.
func (t *Tuning) Providers() []string {
	if t == nil {
		return nil
	}
	return slices.Sorted(maps.Keys(t.costs))
}

// cost is the constants t's tables use for provider (selectCost's rule
// for a provider without its own), with t's allreduce factors.
func (t *Tuning) cost(provider string) Cost {
	if t == nil {
		return selectCost(provider)
	}
	k, ok := t.costs[provider]
	if !ok {
		if _, builtin := costs[provider]; !builtin {
			k, ok = t.costs["tcp"]
		}
	}
	if !ok {
		k = selectCost(provider)
	}
	k.fac = &t.factor
	return k
}

// rule is the algorithm of t's first rule that applies to c over size
// ranks sharing cpus CPUs on provider at bytes, or Auto.
func (t *Tuning) rule(provider string, c Collective, size, cpus, bytes int) Algo {
	if t == nil {
		return Auto
	}
	if e := firstException(t.rules, provider, c, size, cpus, bytes, Auto); e != nil {
		return e.Algo
	}
	return Auto
}

// Table is TableFor with t's constants: the table for size ranks sharing
// cpus CPUs on provider, built on first use and kept for the process.
func (t *Tuning) Table(provider string, size, cpus int) *Table {
	return tableFor(t, provider, size, cpus)
}
