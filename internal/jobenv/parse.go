package jobenv

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"time"
)

// Error names the variable and the bad value.
type Error struct {
	Var, Value, Why string
}

func (e *Error) Error() string {
	return fmt.Sprintf("gorun: environment %s=%q: %s", e.Var, e.Value, e.Why)
}

// Int parses the integer variable name, which must be at least lo.
func Int(getenv func(string) string, name string, lo int) (int, error) {
	s := strings.TrimSpace(getenv(name))
	v, err := strconv.Atoi(s)
	if err != nil {
		return 0, &Error{name, getenv(name), "not an integer"}
	}
	if v < lo {
		return 0, &Error{name, getenv(name), fmt.Sprintf("must be at least %d", lo)}
	}
	return v, nil
}

// DefaultTimeout is the per-operation timeout when GORUN_TIMEOUT is unset:
// long enough for a first large collective on a slow link, short enough
// that a hung job ends.
const DefaultTimeout = 5 * time.Minute

// ParseTimeout parses a GORUN_TIMEOUT value: a Go duration ("90s") or
// seconds ("90", "2.5"). 0 disables the timeout.
func ParseTimeout(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	d, err := time.ParseDuration(s)
	if err != nil {
		n, err2 := strconv.ParseFloat(s, 64)
		if err2 != nil || n < 0 {
			return 0, &Error{Timeout, s, "want a duration (90s) or seconds (90)"}
		}
		d = time.Duration(n * float64(time.Second))
	}
	if d < 0 {
		return 0, &Error{Timeout, s, "negative"}
	}
	return d, nil
}

// OpTimeout is GORUN_TIMEOUT from getenv: DefaultTimeout when unset, 0
// when disabled, set reports whether the variable was given.
func OpTimeout(getenv func(string) string) (d time.Duration, set bool, err error) {
	s := strings.TrimSpace(getenv(Timeout))
	if s == "" {
		return DefaultTimeout, false, nil
	}
	d, err = ParseTimeout(s)
	return d, err == nil, err
}

// Bounds of GORUN_PROBE_INTERVAL (ParseProbe): below MinProbe a probe's
// timeout (3/5 of it) is shorter than a loaded host's scheduling delay;
// above MaxProbe a frozen rank takes many minutes to be reported.
const (
	MinProbe = 50 * time.Millisecond
	MaxProbe = time.Minute
)

// ParseProbe parses a GORUN_PROBE_INTERVAL value: a Go duration ("1s")
// from MinProbe to MaxProbe (50ms to 1m).
func ParseProbe(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	d, err := time.ParseDuration(s)
	if err != nil || d < MinProbe || d > MaxProbe {
		return 0, &Error{Probe, s, "want a duration from 50ms to 1m (e.g. 1s)"}
	}
	return d, nil
}

// ParseSeeds parses GORUN_SEEDS: comma-separated host:port addresses.
func ParseSeeds(s string) ([]string, error) {
	var out []string
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			return nil, &Error{Seeds, s, "empty address in list"}
		}
		if i := strings.LastIndexByte(p, ':'); i <= 0 || i == len(p)-1 {
			return nil, &Error{Seeds, s, fmt.Sprintf("%q is not host:port", p)}
		}
		out = append(out, p)
	}
	return out, nil
}

// JoinHostPort is net.JoinHostPort for a host that may already be
// bracketed.
func JoinHostPort(host, port string) string {
	if strings.Contains(host, ":") && !strings.HasPrefix(host, "[") {
		return "[" + host + "]:" + port
	}
	return host + ":" + port
}

// SlurmNodeList is the job's Slurm node list: SLURM_JOB_NODELIST, or the
// older SLURM_NODELIST.
func SlurmNodeList(getenv func(string) string) string {
	if l := getenv("SLURM_JOB_NODELIST"); l != "" {
		return l
	}
	return getenv("SLURM_NODELIST")
}

// FirstHost returns the first host of a Slurm host list such as
// "node[07-09,12],gpu1" ("node07"), keeping zero padding and what follows
// the bracket ("node[1-2]-ib" → "node1-ib"). A malformed list gives "".
func FirstHost(list string) string {
	list = strings.TrimSpace(list)
	end := len(list)
	if i := strings.IndexAny(list, ",["); i >= 0 {
		end = i
	}
	prefix := list[:end]
	if end == len(list) || list[end] == ',' {
		return prefix
	}
	rest := list[end+1:]
	close := strings.IndexByte(rest, ']')
	if close < 0 {
		return ""
	}
	first := rest[:close]
	if i := strings.IndexAny(first, ",-"); i >= 0 {
		first = first[:i]
	}
	return prefix + first + hostSuffix(rest[close+1:])
}

// hostSuffix is what follows a bracket up to the next host ("-ib,x" →
// "-ib"); a second bracket range is expanded to its first value.
func hostSuffix(s string) string {
	if i := strings.IndexByte(s, ','); i >= 0 {
		s = s[:i]
	}
	if strings.ContainsRune(s, '[') {
		return FirstHost(s)
	}
	return s
}

// SlurmGossipPort is the gossip port ranks started by srun without gorun
// agree on: 20000 + SLURM_JOB_ID mod 20000.
func SlurmGossipPort(jobID string) int {
	if n, err := strconv.ParseUint(jobID, 10, 64); err == nil {
		return 20000 + int(n%20000)
	}
	h := fnv.New32a()
	h.Write([]byte(jobID))
	return 20000 + int(h.Sum32()%20000)
}
