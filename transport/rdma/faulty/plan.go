package faulty

import (
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Action is what a rule does when it fires.
type Action int

const (
	Delay  Action = iota + 1 // sleep Rule.Delay, then go on
	Drop                     // swallow the post: it returns nil but never reaches the peer
	Cut                      // close the connection
	Kill                     // SIGKILL this process
	Freeze                   // SIGSTOP this process (a hung rank)
	Hook                     // call Rule.Hook
)

var actionNames = map[string]Action{"delay": Delay, "drop": Drop, "cut": Cut, "kill": Kill, "freeze": Freeze}

func (a Action) String() string {
	for n, v := range actionNames {
		if v == a {
			return n
		}
	}
	if a == Hook {
		return "hook"
	}
	return fmt.Sprintf("action(%d)", int(a))
}

// Point is where in a request's life a rule is checked.
type Point int

const (
	BeforePost Point = iota // before the request is handed to the provider
	AfterPost               // after it was posted: the transfer is in flight
	InWait                  // in GetSendComp/GetRecvComp, before waiting
)

// Rule fires Action at the After-th event matching Op and At, counted per
// device over all its connections (1-based; 0 fires on every match).
type Rule struct {
	Op     string // "send", "write", "read", "recv", "wait" or "" for any
	At     Point
	After  int64
	Action Action
	Delay  time.Duration
	Hook   func()

	seen atomic.Int64
}

func (r *Rule) String() string {
	s := fmt.Sprintf("%s:%s:%d", r.Action, r.Op, r.After)
	switch r.At {
	case AfterPost:
		s += ":after"
	case InWait:
		s += ":wait"
	default:
		if r.Action == Delay {
			s += ":before" // the delay is the 5th field: keep the 4th
		}
	}
	if r.Action == Delay {
		s += ":" + r.Delay.String()
	}
	return s
}

// match counts ev and reports whether the rule fires for it.
func (r *Rule) match(op string, at Point) bool {
	if r.At != at || (r.Op != "" && r.Op != op) {
		return false
	}
	n := r.seen.Add(1)
	return r.After == 0 || n == r.After
}

// Plan is a set of rules for one process.
type Plan struct {
	Rules []*Rule
}

// ParsePlan reads the GORUN_FAULT syntax: rules separated by ';', each
//
//	[rank=R:]ACTION[:OP[:N[:WHERE[:DELAY]]]]
//
// ACTION is delay, drop, cut, kill or freeze; OP is send, write, read, recv,
// wait or any; N the occurrence (default 1; 0 = every); WHERE is before
// (default), after or wait; DELAY a duration for delay (default 100ms).
// Rules with rank=R apply only to rank R; ParsePlan keeps those for rank
// (pass -1 to keep all).
func ParsePlan(spec string, rank int) (*Plan, error) {
	rs, err := parseRules(spec)
	if err != nil {
		return nil, err
	}
	p := &Plan{}
	for _, r := range rs {
		if r.only == -1 || rank == -1 || r.only == rank {
			p.Rules = append(p.Rules, r.Rule)
		}
	}
	return p, nil
}

// Ranks checks spec as ParsePlan does and returns the ranks its rules name
// (rank=R), in the order given: a launcher checks them against the job's
// ranks before any rank starts.
func Ranks(spec string) ([]int, error) {
	rs, err := parseRules(spec)
	if err != nil {
		return nil, err
	}
	var out []int
	for _, r := range rs {
		if r.only >= 0 {
			out = append(out, r.only)
		}
	}
	return out, nil
}

// parsedRule is a rule of a spec and the rank it names (-1: every rank).
type parsedRule struct {
	*Rule
	only int
}

// parseRules reads every rule of spec (ParsePlan's syntax).
func parseRules(spec string) ([]parsedRule, error) {
	var rs []parsedRule
	for _, part := range strings.Split(spec, ";") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		f := strings.Split(part, ":")
		only := -1
		if strings.HasPrefix(f[0], "rank=") {
			r, err := strconv.Atoi(strings.TrimPrefix(f[0], "rank="))
			if err != nil || r < 0 {
				return nil, fmt.Errorf("faulty: %q: bad rank", part)
			}
			only, f = r, f[1:]
		}
		if len(f) == 0 || len(f) > 5 {
			return nil, fmt.Errorf("faulty: %q: want [rank=R:]ACTION[:OP[:N[:WHERE[:DELAY]]]]", part)
		}
		act, ok := actionNames[f[0]]
		if !ok {
			return nil, fmt.Errorf("faulty: %q: unknown action %q (delay, drop, cut, kill, freeze)", part, f[0])
		}
		r := &Rule{Action: act, After: 1, Delay: 100 * time.Millisecond}
		if len(f) > 1 {
			switch f[1] {
			case "any", "":
			case "send", "write", "read", "recv", "wait":
				r.Op = f[1]
			default:
				return nil, fmt.Errorf("faulty: %q: unknown op %q", part, f[1])
			}
		}
		if len(f) > 2 {
			n, err := strconv.ParseInt(f[2], 10, 64)
			if err != nil || n < 0 {
				return nil, fmt.Errorf("faulty: %q: bad occurrence %q", part, f[2])
			}
			r.After = n
		}
		if len(f) > 3 {
			switch f[3] {
			case "before", "":
			case "after":
				r.At = AfterPost
			case "wait":
				r.At = InWait
			default:
				return nil, fmt.Errorf("faulty: %q: unknown point %q (before, after, wait)", part, f[3])
			}
		}
		if r.Op == "wait" {
			r.At = InWait
		}
		if len(f) > 4 {
			d, err := time.ParseDuration(f[4])
			if err != nil || d < 0 {
				return nil, fmt.Errorf("faulty: %q: bad delay %q", part, f[4])
			}
			r.Delay = d
		}
		rs = append(rs, parsedRule{r, only})
	}
	return rs, nil
}
