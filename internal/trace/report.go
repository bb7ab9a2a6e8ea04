package trace

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Summary is the job report: per collective, and who arrived late.
type Summary struct {
	Ranks int // ranks whose files were read
	Size  int // ranks in the job
	// Silent are the job's ranks without events: no file, or nothing
	// written before the rank ended (killed, or exited without closing).
	Silent []int
	// Restarted are the ranks with more than one incarnation (gorun
	// --max-restarts); each incarnation is compared on its own
	// communicators.
	Restarted []int
	Colls     []CollStat // by total time, largest first
	// Late is per rank with events (Silent ones are left out): how often
	// it was the last member to enter a collective of a communicator, and
	// how long after the first member.
	Late []LateStat
	// Matched is how many collectives every member of their communicator
	// recorded, over all communicators (Comms of them).
	Matched, Comms int
	// Straggler is the rank last to arrive clearly most often and by
	// enough to matter (see the rule in Summarize), or -1.
	Straggler int
}

// CollStat is one collective (or send, recv) over the job.
type CollStat struct {
	Name  string
	Calls int           // per rank (the most any rank made)
	Bytes int64         // per rank, mean over the ranks that made the call
	Total time.Duration // per rank, mean over the ranks that made the call
	// BusBW is nccl-tests' bus bandwidth at the mean time, in bytes/s:
	// each call's bytes weighted by the factor of its communicator's size.
	BusBW float64
}

// Mean is the mean time of one call.
func (c CollStat) Mean() time.Duration {
	if c.Calls == 0 {
		return 0
	}
	return c.Total / time.Duration(c.Calls)
}

// LateStat is one rank's arrival record, over all its communicators (and
// incarnations).
type LateStat struct {
	Rank     int
	Ops      int           // matched collectives it took part in
	Last     int           // of those, the ones it entered last
	MeanLate time.Duration // mean over Ops of its entry − the first member's
	MaxLate  time.Duration
	// MeanTime is the mean time of those collectives (over their
	// members), which the straggler rule weighs MeanLate against.
	MeanTime time.Duration
	chance   float64 // Σ 1/members over Ops: Last by chance alone
}

// pointToPoint reports whether name is a send, a receive or a group of
// them: their sequence numbers count a pair's messages, not the
// communicator's collectives, so arrivals leave them out.
func pointToPoint(name string) bool { return name == "send" || name == "recv" || name == "sendrecv" }

// busFactor is nccl-tests' busbw/algbw for name on n ranks; the
// v-collectives (variable counts) take their fixed-count kin's.
func busFactor(name string, n int) float64 {
	if n < 1 {
		return 1
	}
	f := float64(n-1) / float64(n)
	switch name {
	case "allreduce":
		return 2 * f
	case "allgather", "reducescatter", "alltoall", "gather", "scatter",
		"allgatherv", "alltoallv", "gatherv", "scatterv":
		return f
	}
	return 1
}

// The straggler rule. A rank is the straggler when, over at least
// minStragglerOps collectives it took part in, it entered last in at
// least half of them and in 1.5× as many as chance would make it (1 in
// members, per communicator), and it was late enough to matter: on
// average at least minStragglerLate after the first member, and at least
// stragglerLateShare of those collectives' mean time.
const (
	minStragglerOps = 3
	// minStragglerLate: below a millisecond, who enters last is noise on
	// a shared host (a scheduler time slice, a GC pause, the clock sync's
	// error of tens of µs across hosts), not a rank to go and fix; a run
	// once named a rank 25 µs late. Horovod's and NCCL's users look for
	// stalls of milliseconds and more.
	minStragglerLate = time.Millisecond
	// stragglerLateShare: a rank whose lateness is under a tenth of the
	// collectives' time costs the others little (a 1 GiB allreduce of
	// 100 ms does not wait on a rank 2 ms late).
	stragglerLateShare = 0.1
)

// commKey names a communicator across ranks: its members' shared ID and
// which of the communicators with that ID it is, in the order each
// process made them. legacy is lane 0 of a file without comm records
// (version 1), taken for the world.
type commKey struct {
	id     uint64
	nth    int
	legacy bool
}

// arrival is one member's entries into a communicator's collectives.
type arrival struct {
	late   int              // index in Summary.Late
	starts map[uint32]int64 // seq -> corrected entry
	times  map[uint32]int64 // seq -> duration
}

// commSize is the size of the communicator lane records (the job's when
// the file does not say).
func (f *RankFile) commSize(lane uint16) int {
	if int(lane) < len(f.Comms) && f.Comms[lane].Size > 0 {
		return f.Comms[lane].Size
	}
	return f.Header.Size
}

// commKeys names the communicator of each of f's lanes that records one.
func (f *RankFile) commKeys() map[uint16]commKey {
	keys := map[uint16]commKey{}
	if len(f.Comms) == 0 {
		keys[0] = commKey{legacy: true}
		return keys
	}
	nth := map[uint64]int{}
	for lane, c := range f.Comms {
		if c.Size == 0 {
			continue
		}
		keys[uint16(lane)] = commKey{id: c.ID, nth: nth[c.ID]}
		nth[c.ID]++
	}
	return keys
}

// Summarize computes the report of files (one per rank, clocks corrected
// by their offsets, with their restarted incarnations). Arrivals are
// compared per communicator, among the members that recorded it.
func Summarize(files []*RankFile) *Summary {
	s := &Summary{Ranks: len(files), Straggler: -1}
	if len(files) == 0 {
		return s
	}
	n := files[0].Header.Size
	s.Size = n
	has := make([]bool, n)
	var active []*RankFile // the ranks with events, which lateness compares
	for _, f := range files {
		events := false
		for _, inc := range f.Incarnations() {
			events = events || len(inc.Events) > 0
		}
		if events {
			active = append(active, f)
			if f.Header.Rank >= 0 && f.Header.Rank < n {
				has[f.Header.Rank] = true
			}
		}
		if len(f.Restarts) > 0 {
			s.Restarted = append(s.Restarted, f.Header.Rank)
		}
	}
	for r, ok := range has {
		if !ok {
			s.Silent = append(s.Silent, r)
		}
	}
	s.Late = make([]LateStat, len(active))
	for i, f := range active {
		s.Late[i].Rank = f.Header.Rank
	}
	type acc struct {
		calls int
		bytes int64
		bus   float64 // bytes × the bus factor of each call's communicator
		total int64
	}
	per := map[string][]acc{} // name -> per file
	comms := map[commKey][]*arrival{}
	for i, f := range files {
		li := slices.Index(active, f)
		for _, inc := range f.Incarnations() {
			keys := inc.commKeys()
			mine := map[uint16]*arrival{} // made at a lane's first collective: a member without any is not compared
			for _, e := range inc.Events {
				if e.Kind != KindOp {
					continue
				}
				a := per[e.Name]
				if a == nil {
					a = make([]acc, len(files))
					per[e.Name] = a
				}
				a[i].calls++
				a[i].bytes += e.Bytes
				a[i].bus += float64(e.Bytes) * busFactor(e.Name, inc.commSize(e.Lane))
				a[i].total += e.End - e.Start
				k, ok := keys[e.Lane]
				if !ok || pointToPoint(e.Name) {
					continue
				}
				m := mine[e.Lane]
				if m == nil {
					m = &arrival{late: li, starts: map[uint32]int64{}, times: map[uint32]int64{}}
					mine[e.Lane] = m
					comms[k] = append(comms[k], m)
				}
				m.starts[e.Seq] = inc.Shift(e.Start)
				m.times[e.Seq] = e.End - e.Start
			}
		}
	}
	for name, a := range per {
		c := CollStat{Name: name}
		var bytes, total, callers int64
		var bus float64
		for _, x := range a {
			if x.calls == 0 {
				continue // a rank that left no events, or never made this call
			}
			c.Calls = max(c.Calls, x.calls)
			bytes += x.bytes
			bus += x.bus
			total += x.total
			callers++
		}
		c.Bytes = bytes / callers
		c.Total = time.Duration(total / callers)
		if c.Total > 0 {
			c.BusBW = bus / float64(callers) / c.Total.Seconds()
		}
		s.Colls = append(s.Colls, c)
	}
	sort.Slice(s.Colls, func(i, j int) bool {
		if s.Colls[i].Total != s.Colls[j].Total {
			return s.Colls[i].Total > s.Colls[j].Total
		}
		return s.Colls[i].Name < s.Colls[j].Name
	})
	sum := make([]int64, len(active))
	times := make([]int64, len(active))
	for _, members := range comms {
		if len(members) < 2 {
			continue
		}
		matched := 0
		for seq, first := range members[0].starts {
			last, lastAt, total := 0, first, int64(0)
			complete := true
			for i, m := range members {
				t, ok := m.starts[seq]
				if !ok {
					complete = false
					break
				}
				first = min(first, t)
				if t > lastAt || i == 0 {
					last, lastAt = i, t
				}
				total += m.times[seq]
			}
			if !complete {
				continue
			}
			matched++
			if lastAt > first { // all at once: none was last
				s.Late[members[last].late].Last++
			}
			for _, m := range members {
				l := &s.Late[m.late]
				t := m.starts[seq]
				l.Ops++
				l.chance += 1 / float64(len(members))
				l.MaxLate = max(l.MaxLate, time.Duration(t-first))
				sum[m.late] += t - first
				times[m.late] += total / int64(len(members))
			}
		}
		if matched > 0 {
			s.Matched += matched
			s.Comms++
		}
	}
	for i := range s.Late {
		if l := &s.Late[i]; l.Ops > 0 {
			l.MeanLate = time.Duration(sum[i] / int64(l.Ops))
			l.MeanTime = time.Duration(times[i] / int64(l.Ops))
		}
	}
	best := -1
	for i, l := range s.Late {
		if l.Ops < minStragglerOps || 2*l.Last < l.Ops || float64(l.Last) < 1.5*l.chance ||
			l.MeanLate < minStragglerLate || float64(l.MeanLate) < stragglerLateShare*float64(l.MeanTime) {
			continue
		}
		if b := s.Late[max(best, 0)]; best < 0 || l.Last*b.Ops > b.Last*l.Ops ||
			l.Last*b.Ops == b.Last*l.Ops && l.MeanLate > b.MeanLate {
			best = i
		}
	}
	if best >= 0 {
		s.Straggler = s.Late[best].Rank
	}
	return s
}

// String formats the report as gorun prints it.
func (s *Summary) String() string {
	var b strings.Builder
	if s.Size > s.Ranks {
		fmt.Fprintf(&b, "gorun: report: %d of %d ranks\n", s.Ranks, s.Size)
	} else {
		fmt.Fprintf(&b, "gorun: report: %d ranks\n", s.Ranks)
	}
	if len(s.Silent) > 0 {
		ranks := make([]string, len(s.Silent))
		for i, r := range s.Silent {
			ranks[i] = strconv.Itoa(r)
		}
		fmt.Fprintf(&b, "  no events from rank %s (no file, or none written before the rank ended)\n", strings.Join(ranks, ", "))
	}
	fmt.Fprintf(&b, "  %-14s %8s %12s %12s %12s %12s\n", "collective", "calls", "bytes/rank", "total", "mean", "busbw")
	for _, c := range s.Colls {
		bw := "-"
		switch {
		case c.BusBW >= 1e9:
			bw = fmt.Sprintf("%.3g GB/s", c.BusBW/1e9)
		case c.BusBW >= 1e6:
			bw = fmt.Sprintf("%.3g MB/s", c.BusBW/1e6)
		case c.BusBW > 0:
			bw = fmt.Sprintf("%.3g kB/s", c.BusBW/1e3)
		}
		fmt.Fprintf(&b, "  %-14s %8d %12s %12s %12s %12s\n", c.Name, c.Calls, byteSize(c.Bytes), round(c.Total), round(c.Mean()), bw)
	}
	if len(s.Restarted) > 0 {
		fmt.Fprintf(&b, "  restarted: %s (each incarnation's collectives are compared on its own communicators)\n", rankList(s.Restarted))
	}
	if s.Matched > 0 {
		comms := "1 communicator"
		if s.Comms != 1 {
			comms = fmt.Sprintf("%d communicators", s.Comms)
		}
		fmt.Fprintf(&b, "  arrivals over %d collectives of %s (lateness: entry after the communicator's first member):\n", s.Matched, comms)
		fmt.Fprintf(&b, "  %-6s %12s %14s %14s\n", "rank", "last", "mean lateness", "max lateness")
		for _, l := range s.Late {
			pct := 0.0
			if l.Ops > 0 {
				pct = 100 * float64(l.Last) / float64(l.Ops)
			}
			fmt.Fprintf(&b, "  %-6d %5d (%3.0f%%) %14s %14s\n", l.Rank, l.Last, pct, round(l.MeanLate), round(l.MaxLate))
		}
	}
	if s.Straggler >= 0 {
		l := s.Late[0]
		for _, x := range s.Late {
			if x.Rank == s.Straggler {
				l = x
			}
		}
		fmt.Fprintf(&b, "  straggler: rank %d (last in %d of %d collectives, %s late on average)\n", l.Rank, l.Last, l.Ops, round(l.MeanLate))
	} else if s.Matched > 0 {
		fmt.Fprintf(&b, "  straggler: none (no rank was last in most of its collectives by at least %s and %.0f%% of their time on average)\n",
			minStragglerLate, 100*stragglerLateShare)
	}
	return b.String()
}

// rankList is "rank 3" or "ranks 0, 2".
func rankList(ranks []int) string {
	s := make([]string, len(ranks))
	for i, r := range ranks {
		s[i] = strconv.Itoa(r)
	}
	if len(ranks) == 1 {
		return "rank " + s[0]
	}
	return "ranks " + strings.Join(s, ", ")
}

func round(d time.Duration) string {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d >= time.Microsecond:
		return d.Round(100 * time.Nanosecond).String()
	}
	return d.String()
}

func byteSize(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
