package launcher

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Host is one machine of a job and the number of ranks it takes.
type Host struct {
	Name  string
	Slots int
	// MaxSlots is the most ranks the host may take (a hostfile's
	// max_slots): up to it without --oversubscribe, and never beyond it,
	// as Open MPI does. 0: no bound, and no rank beyond Slots without
	// --oversubscribe. Run refuses MaxSlots below Slots and Slots below 1.
	MaxSlots int
}

// maxSlots bounds one host's slot count, so a typo cannot ask for 2^60 ranks.
const maxSlots = 1 << 20

// ParseHostfile reads a hostfile: one host per line, as Open MPI's
// ("host slots=N max_slots=M", both optional; slots default to 1) or as
// MPICH's ("host:N"; an IPv6 address with a count is "[addr]:N", as for
// -H); "#" starts a comment. A host listed twice gets the sum of its
// slots, and so do names of this machine (mergeLocal).
func ParseHostfile(r io.Reader) ([]Host, error) {
	var hosts []Host
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		h, counted, err := hostfileName(fields[0])
		if err != nil {
			return nil, fmt.Errorf("%w: line %d: %v", ErrHostfile, n, err)
		}
		for _, f := range fields[1:] {
			k, v, ok := strings.Cut(f, "=")
			if !ok {
				return nil, fmt.Errorf("%w: line %d: %q is not key=value", ErrHostfile, n, f)
			}
			switch k {
			case "slots", "max_slots", "max-slots":
				s, err := parseSlots(v)
				if err != nil {
					return nil, fmt.Errorf("%w: line %d: %s: %v", ErrHostfile, n, k, err)
				}
				if k != "slots" {
					h.MaxSlots = s
				} else if counted {
					return nil, fmt.Errorf("%w: line %d: %s gives its slots twice (host:N and slots=)", ErrHostfile, n, fields[0])
				} else {
					h.Slots = s
				}
			default:
				return nil, fmt.Errorf("%w: line %d: unknown key %q", ErrHostfile, n, k)
			}
		}
		if h.MaxSlots > 0 && h.MaxSlots < h.Slots {
			return nil, fmt.Errorf("%w: line %d: %s: max_slots=%d is less than its %d slots", ErrHostfile, n, h.Name, h.MaxSlots, h.Slots)
		}
		hosts = addHost(hosts, h)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrHostfile, err)
	}
	return mergeLocal(hosts), nil
}

// hostfileName parses a hostfile line's first word: a host, MPICH's
// "host:N" or "[addr]:N" (counted), or an IPv6 address alone, which has
// more than one colon.
func hostfileName(word string) (h Host, counted bool, err error) {
	h = Host{Name: word, Slots: 1}
	if strings.HasPrefix(word, "[") || strings.Count(word, ":") == 1 {
		if h, err = parseHostItem(word); err != nil {
			return h, false, err
		}
		return h, strings.Contains(word, "]:") || !strings.HasPrefix(word, "["), nil
	}
	return h, false, checkHostName(h.Name)
}

// ParseHostList parses mpirun's -H value: "host1:2,host2:2,host3" (a host
// without a count takes one slot). IPv6 addresses go in brackets: "[::1]:2".
// Names of this machine are one host (mergeLocal).
func ParseHostList(s string) ([]Host, error) {
	var hosts []Host
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			return nil, fmt.Errorf("%w: empty host in -H %q", ErrUsage, s)
		}
		h, err := parseHostItem(item)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrUsage, err)
		}
		hosts = addHost(hosts, h)
	}
	return mergeLocal(hosts), nil
}

// parseHostItem parses "host", "host:N", "[addr]" or "[addr]:N".
func parseHostItem(item string) (Host, error) {
	h := Host{Name: item, Slots: 1}
	if strings.HasPrefix(item, "[") {
		end := strings.IndexByte(item, ']')
		if end < 0 {
			return h, fmt.Errorf("unclosed bracket in %q", item)
		}
		h.Name = item[1:end]
		if rest := item[end+1:]; rest != "" {
			n, ok := strings.CutPrefix(rest, ":")
			if !ok {
				return h, fmt.Errorf("bad host %q", item)
			}
			var err error
			if h.Slots, err = parseSlots(n); err != nil {
				return h, fmt.Errorf("host %q: %v", item, err)
			}
		}
	} else if name, n, ok := strings.Cut(item, ":"); ok {
		h.Name = name
		var err error
		if h.Slots, err = parseSlots(n); err != nil {
			return h, fmt.Errorf("host %q: %v", item, err)
		}
	}
	return h, checkHostName(h.Name)
}

func parseSlots(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > maxSlots {
		return 0, fmt.Errorf("slot count %q is not an integer in [1, %d]", v, maxSlots)
	}
	return n, nil
}

// mergeLocal makes the hosts that name this machine (isLocalHost:
// localhost, 127.0.0.0/8, ::1, its host name, its addresses) one host, as
// Open MPI does: at the first one's place, under its name, with their
// slots added up. So ranks there are numbered and bound as one host's,
// not two hosts' that share CPUs. Hosts of other network namespaces (the
// namespace cluster) have other names and addresses and stay apart.
func mergeLocal(hosts []Host) []Host {
	local := -1
	var out []Host
	for _, h := range hosts {
		if !isLocalHost(h.Name) {
			out = addHost(out, h)
			continue
		}
		if local < 0 {
			local = len(out)
			out = append(out, h)
			continue
		}
		out[local] = sumHosts(out[local], h)
	}
	return out
}

func addHost(hosts []Host, h Host) []Host {
	for i := range hosts {
		if hosts[i].Name == h.Name {
			hosts[i] = sumHosts(hosts[i], h)
			return hosts
		}
	}
	return append(hosts, h)
}

// sumHosts is a host listed twice, under a's name: the slots add up, and
// so do the max_slots when both lines bound it (else it has no bound).
func sumHosts(a, b Host) Host {
	a.Slots = min(a.Slots+b.Slots, maxSlots)
	if a.MaxSlots > 0 && b.MaxSlots > 0 {
		a.MaxSlots = min(a.MaxSlots+b.MaxSlots, maxSlots)
	} else {
		a.MaxSlots = 0
	}
	return a
}

// checkHosts holds hosts given through Config to what -H and --hostfile's
// parsers enforce: a name checkHostName accepts ("" is this machine),
// Slots in [1, maxSlots], MaxSlots 0 (no bound) or in [Slots, maxSlots].
// Before 2026-12-01 a host of Slots 3 and MaxSlots 2 took three ranks,
// and a name such as "-oProxyCommand=..." went to ssh as it was.
func checkHosts(hosts []Host) error {
	for _, h := range hosts {
		if h.Name != "" {
			if err := checkHostName(h.Name); err != nil {
				return fmt.Errorf("%w: %v", ErrUsage, err)
			}
		}
		switch {
		case h.Slots < 1 || h.Slots > maxSlots:
			return fmt.Errorf("%w: host %q: Slots %d is not in [1, %d]", ErrUsage, h.Name, h.Slots, maxSlots)
		case h.MaxSlots < 0 || h.MaxSlots > maxSlots:
			return fmt.Errorf("%w: host %q: MaxSlots %d is not in [0, %d] (0: no bound)", ErrUsage, h.Name, h.MaxSlots, maxSlots)
		case h.MaxSlots > 0 && h.MaxSlots < h.Slots:
			return fmt.Errorf("%w: host %q: MaxSlots %d is less than its %d Slots (as a hostfile's max_slots below slots)", ErrUsage, h.Name, h.MaxSlots, h.Slots)
		}
	}
	return nil
}

// checkHostName accepts host names, IPv4 and IPv6 addresses and agent
// targets such as network namespace names; it rejects anything a shell or
// an agent's option parser could interpret.
func checkHostName(name string) error {
	if name == "" {
		return fmt.Errorf("empty host name")
	}
	if len(name) > 255 {
		return fmt.Errorf("host name longer than 255 bytes")
	}
	if name[0] == '-' {
		return fmt.Errorf("host name %q starts with '-'", name)
	}
	for _, r := range name {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' ||
			r == '.' || r == '-' || r == '_' || r == ':' || r == '%' || r == '@'
		if !ok {
			return fmt.Errorf("host name %q contains %q", name, r)
		}
	}
	return nil
}

// Slot is one rank's place in the job.
type Slot struct {
	Rank      int
	Host      string // "" for this machine when the job has no host list
	LocalRank int    // index among the ranks on the same host
	LocalSize int    // number of ranks on the same host
}

// Place assigns np ranks to hosts host by host, as mpirun's by-slot
// mapping does: host 0's slots take ranks 0..slots-1, and so on. With no
// hosts every rank runs on this machine.
func Place(hosts []Host, np int) ([]Slot, error) {
	if np < 1 {
		return nil, fmt.Errorf("%w: -np %d: need at least one rank", ErrUsage, np)
	}
	if len(hosts) == 0 {
		hosts = []Host{{Name: "", Slots: np}}
	}
	hosts = mergeLocal(hosts)
	slots := make([]Slot, 0, np)
	for _, h := range hosts {
		start := len(slots)
		for i := 0; i < h.Slots && len(slots) < np; i++ {
			slots = append(slots, Slot{Rank: len(slots), Host: h.Name, LocalRank: i})
		}
		for i := start; i < len(slots); i++ {
			slots[i].LocalSize = len(slots) - start
		}
	}
	if len(slots) < np {
		return nil, fmt.Errorf("%w: -np %d but the hosts have %d slots (--oversubscribe allows more)", ErrUsage, np, len(slots))
	}
	return slots, nil
}
