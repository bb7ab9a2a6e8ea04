package comm

import (
	"strings"
	"testing"
)

// TestCheckEnv: what gorun checks once before any rank starts, with the
// choices a launched job has (not mem; verbs even when this build lacks
// it, since the ranks' build may have it).
func TestCheckEnv(t *testing.T) {
	for _, c := range []struct {
		env       map[string]string
		size      int
		bad       bool
		want, not string
	}{
		{env: map[string]string{}, size: 4},
		{env: map[string]string{"GORUN_TRANSPORT": "auto", "GORUN_ALGO": "allreduce:ring", "GORUN_DEBUG": "info"}, size: 4},
		{env: map[string]string{"GORUN_TRANSPORT": "verbs"}, size: 4},
		{env: map[string]string{"GORUN_TRANSPORT": "TCP"}, size: 4},
		{env: map[string]string{"GORUN_TRANSPORT": "infiniband"}, size: 4, bad: true, want: "want auto or one of ", not: "mem"},
		{env: map[string]string{"GORUN_TRANSPORT": "mem"}, size: 3, bad: true, want: "one process only"},
		{env: map[string]string{"GORUN_ALGO": "allreduce:nosuch"}, size: 2, bad: true, want: "nosuch"},
		{env: map[string]string{"GORUN_DEBUG": "loud"}, size: 2, bad: true, want: "GORUN_DEBUG"},
		{env: map[string]string{"GORUN_TIMEOUT": "soon"}, size: 2, bad: true, want: "GORUN_TIMEOUT"},
	} {
		err := CheckEnv(func(k string) string { return c.env[k] }, c.size)
		if (err != nil) != c.bad {
			t.Errorf("%v: %v, want bad=%v", c.env, err, c.bad)
			continue
		}
		if err == nil {
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, c.want) || c.not != "" && strings.Contains(msg, c.not) {
			t.Errorf("%v: %q, want it to say %q and not %q", c.env, msg, c.want, c.not)
		}
		for _, p := range []string{"shm", "tcp", "verbs"} {
			if c.env["GORUN_TRANSPORT"] == "infiniband" && !strings.Contains(err.Error(), p) {
				t.Errorf("%q does not offer %s", err, p)
			}
		}
	}
}
