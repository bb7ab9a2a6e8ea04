package reliability

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/launcher"
)

// TestSoakUnderLauncher builds examples/soak and runs it with 4 ranks
// under the launcher, over tcp and over shm at once, for REL_SOAK (default
// 10 s each; 4 s with -short): every result checked, memory flat, exit 0.
func TestSoakUnderLauncher(t *testing.T) {
	d := 10 * time.Second
	if testing.Short() {
		d = 4 * time.Second
	}
	if s := envInt("REL_SOAK_SECONDS", 0); s > 0 {
		d = time.Duration(s) * time.Second
	}
	bin := buildSoak(t)
	var wg sync.WaitGroup
	for _, tr := range []string{"tcp", "shm"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var out, errb bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), d+90*time.Second)
			defer cancel()
			start := time.Now()
			err := launcher.Run(ctx, launcher.Config{NP: 4, Program: bin, Args: []string{"-duration", d.String()},
				Transport: tr, UseSrun: "no", KillGrace: time.Second, Stdout: &out, Stderr: &errb})
			if err != nil {
				t.Errorf("%s: soak failed: %v\nstdout:\n%s\nstderr:\n%s", tr, err, out.String(), errb.String())
				return
			}
			re := regexp.MustCompile(`soak: rank \d+: (\d+) steps.*RSS after warm-up ([\d.]+) MiB, at the end ([\d.]+) MiB`)
			ranks := 0
			for _, l := range strings.Split(out.String(), "\n") {
				if m := re.FindStringSubmatch(l); m != nil {
					ranks++
					if ranks == 1 {
						t.Logf("%s: %v: %s steps, RSS %s → %s MiB", tr, time.Since(start).Round(time.Second), m[1], m[2], m[3])
					}
				}
			}
			if ranks != 4 {
				t.Errorf("%s: %d ranks reported, want 4\n%s", tr, ranks, out.String())
			}
		}()
	}
	wg.Wait()
}

// buildSoak builds examples/soak into the test's temporary directory and
// returns its path; without a go tool the test is skipped.
func buildSoak(t *testing.T) string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool to build examples/soak")
	}
	bin := filepath.Join(t.TempDir(), "soak")
	if out, err := exec.Command(gobin, "build", "-o", bin, "../examples/soak").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}
