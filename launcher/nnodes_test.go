package launcher

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestNodesMeet: two gorun calls with --nnodes 2 form one job of 4 ranks,
// each rank with its global rank and the shared job id and token.
func TestNodesMeet(t *testing.T) {
	port, err := freePort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	seed := fmt.Sprintf("127.0.0.1:%d", port)
	outs := make([]string, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for node := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[node], _, errs[node] = runJob(t, "env", Config{NP: 2, NNodes: 2, NodeRank: node, Seed: seed})
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for node, out := range outs {
		for r := node * 2; r < node*2+2; r++ {
			lines := strings.Join(rankLines(t, out)[r], "\n")
			for _, w := range []string{EnvRank + "=" + fmt.Sprint(r), EnvSize + "=4", EnvLocalRank + "=" + fmt.Sprint(r-node*2),
				EnvSeeds + "=" + fmt.Sprintf("127.0.0.1:%d", port+1)} {
				if !strings.Contains(lines, w+"\n") && !strings.HasSuffix(lines, w) {
					t.Errorf("node %d rank %d lacks %s:\n%s", node, r, w, lines)
				}
			}
			for _, l := range rankLines(t, out)[r] {
				if strings.HasPrefix(l, EnvJobID+"=") || strings.HasPrefix(l, EnvJobToken+"=") {
					ids[l] = true
				}
			}
		}
	}
	if len(ids) != 2 {
		t.Errorf("the nodes' ranks disagree on the job id or token: %v", ids)
	}
}

// TestNodesBadInput: each mistake fails in seconds with a clear error.
func TestNodesBadInput(t *testing.T) {
	port, err := freePort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	seed := fmt.Sprintf("127.0.0.1:%d", port)
	quick := func(cfg Config) error {
		cfg.Program, cfg.SeedTimeout = "/bin/true", 3*time.Second
		cfg.Stdout, cfg.Stderr = new(strings.Builder), new(strings.Builder)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		return Run(ctx, cfg)
	}
	t.Run("seed-down", func(t *testing.T) {
		start := time.Now()
		err := quick(Config{NP: 1, NNodes: 2, NodeRank: 1, Seed: seed})
		if err == nil || !strings.Contains(err.Error(), "did not answer within 3s") {
			t.Fatalf("got %v", err)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("took %v", d)
		}
	})
	t.Run("nnodes-mismatch", func(t *testing.T) {
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for node, nn := range []int{2, 3} {
			wg.Add(1)
			go func() { defer wg.Done(); errs[node] = quick(Config{NP: 1, NNodes: nn, NodeRank: node, Seed: seed}) }()
		}
		wg.Wait()
		for node, err := range errs {
			if err == nil || !strings.Contains(err.Error(), "node 1 has --nnodes 3, node 0 has --nnodes 2") {
				t.Errorf("node %d: %v", node, err)
			}
		}
	})
	t.Run("flags", func(t *testing.T) {
		for _, cfg := range []Config{{NP: 1, NNodes: 2, NodeRank: 2, Seed: seed}, {NP: 1, NNodes: 2, Seed: "nohostport"},
			{NP: 1, Seed: seed}, {NP: 1, NNodes: 2, Seed: seed, Hosts: []Host{{Name: "a", Slots: 1}}}} {
			if err := quick(cfg); !errors.Is(err, ErrUsage) {
				t.Errorf("%+v: %v, want ErrUsage", cfg, err)
			}
		}
	})
}
