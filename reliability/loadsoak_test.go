package reliability

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/launcher"
	"github.com/gorun-hpc/gorun/scripts/cluster"
)

// TestNoFalseDeathUnderLoad is issue 15's load soak: examples/soak with 4
// ranks on this machine's 2 cores beside a CPU hog on one core
// (taskset -c 0, a shell loop) for REL_SOAK_SECONDS (default 30). Any
// rank declared dead fails a collective, and the soak, without
// --elastic, then exits non-zero. Two layouts, one after the other:
// "local" (gorun -np 4: one host, the witnesses and the kernel's word
// protect a starved rank, comm/witness.go) and "hosts" (one rank on each
// of 4 namespace hosts, over tcp: no witness, only the gossip detector's
// timeouts stand between a starved rank and a false death). It takes
// about a minute per layout, so it runs only with REL_LOAD_SOAK=1;
// REL_LOAD_SOAK_LAYOUT=local or hosts runs one.
func TestNoFalseDeathUnderLoad(t *testing.T) {
	if os.Getenv("REL_LOAD_SOAK") == "" {
		t.Skip("set REL_LOAD_SOAK=1 (a minute or two per layout; RELIABILITY.md)")
	}
	d := time.Duration(envInt("REL_SOAK_SECONDS", 30)) * time.Second
	bin := buildSoak(t)
	layouts := []string{"local", "hosts"}
	if l := os.Getenv("REL_LOAD_SOAK_LAYOUT"); l != "" {
		layouts = []string{l}
	}
	for _, layout := range layouts {
		t.Run(layout, func(t *testing.T) {
			cfg := launcher.Config{NP: 4, Program: bin, Args: []string{"-duration", d.String()},
				UseSrun: "no", KillGrace: time.Second}
			switch layout {
			case "local":
			case "hosts":
				c := cluster.Start(t, cluster.Options{Hosts: 4})
				for _, h := range c.Hosts {
					cfg.Hosts = append(cfg.Hosts, launcher.Host{Name: h.Name, Slots: 1})
				}
				cfg.LaunchAgent, cfg.Transport = c.Agent(), "tcp"
			default:
				t.Fatalf("layout %q: want local or hosts", layout)
			}
			if os.Getenv("REL_LOAD_SOAK_TRACE") != "" { // a file name: the job's stderr goes to FILE.LAYOUT
				cfg.Export = []string{"GORUN_DEBUG=trace"} // memberlist's log: probes, suspicions, refutations
			}
			ctx, cancel := context.WithTimeout(context.Background(), d+2*time.Minute)
			defer cancel()
			hog := cpuHog(ctx, t)
			var out, errb bytes.Buffer
			cfg.Stdout, cfg.Stderr = &out, &errb
			start := time.Now()
			err := launcher.Run(ctx, cfg)
			hog()
			if err != nil {
				t.Fatalf("soak beside the hog failed after %v (a rank declared dead?): %v\nstdout:\n%s\nstderr:\n%s",
					time.Since(start).Round(time.Millisecond), err, out.String(), errb.String())
			}
			re := regexp.MustCompile(`soak: rank (\d+): (\d+) steps`)
			ranks := 0
			for _, l := range strings.Split(out.String(), "\n") {
				if m := re.FindStringSubmatch(l); m != nil {
					ranks++
					t.Logf("%s: rank %s: %s checked steps", layout, m[1], m[2])
				}
			}
			if ranks != 4 {
				t.Errorf("%d ranks reported, want 4\n%s", ranks, out.String())
			}
			if cfg.Export != nil { // how close it came: gossip suspected a live rank, which refuted
				if err := os.WriteFile(os.Getenv("REL_LOAD_SOAK_TRACE")+"."+layout, errb.Bytes(), 0o644); err != nil {
					t.Error(err)
				}
				t.Logf("%s: %d suspicions, %d refutations in memberlist's log", layout,
					strings.Count(errb.String(), "memberlist: Suspect "), strings.Count(errb.String(), "Refuting a suspect"))
			}
			if s := errb.String(); strings.Contains(s, "peer failed") {
				t.Errorf("stderr mentions a death:\n%s", s)
			}
		})
	}
}

// cpuHog starts a busy shell loop on CPU 0 (on any CPU without taskset)
// until the returned function is called or ctx ends.
func cpuHog(ctx context.Context, t *testing.T) (stop func()) {
	argv := []string{"sh", "-c", "while :; do :; done"}
	if _, err := exec.LookPath("taskset"); err == nil {
		argv = append([]string{"taskset", "-c", "0"}, argv...)
	}
	hctx, cancel := context.WithCancel(ctx)
	cmd := exec.CommandContext(hctx, argv[0], argv[1:]...)
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("CPU hog: %v", err)
	}
	return func() {
		cancel()
		_ = cmd.Wait()
	}
}
