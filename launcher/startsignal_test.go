package launcher

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// SIGINT or SIGTERM that comes before any rank has started (gorun is
// building the program, or waiting at the --nnodes seed for the other
// nodes) ends the job at once, with 128+signal, as it does later. gorun
// went on until the build was done or --seed-timeout was over, and then
// exited 1 (the seed) or started the ranks only to stop them.
func TestSignalBeforeRanksStart(t *testing.T) {
	dir := t.TempDir()
	// A go command that never finishes, so that the build is under way
	// when the signal comes.
	bin := filepath.Join(dir, "bin")
	pkg := filepath.Join(dir, "pkg")
	for _, d := range []string{bin, pkg} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(bin, "go"), []byte("#!/bin/sh\ntouch "+dir+"/building\nexec sleep 60\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pkg, "main.go"), []byte("package main\n\nfunc main() {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	port, err := freePort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	seed := fmt.Sprintf("127.0.0.1:%d", port)

	for _, tc := range []struct {
		name  string
		cfg   Config
		begun func() bool // the step that the signal interrupts is under way
		sig   syscall.Signal
	}{
		{"go-build", Config{NP: 1, Program: pkg}, func() bool {
			_, err := os.Stat(filepath.Join(dir, "building"))
			return err == nil
		}, syscall.SIGINT},
		{"nnodes-seed", Config{NP: 1, NNodes: 2, Seed: seed, SeedTimeout: time.Minute, Program: testBinary(t)}, func() bool {
			c, err := net.Dial("tcp", seed)
			if err == nil {
				c.Close()
			}
			return err == nil
		}, syscall.SIGTERM},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sigs := make(chan os.Signal, 1)
			var stderr bytes.Buffer
			cfg := tc.cfg
			cfg.Signals, cfg.Stdout, cfg.Stderr, cfg.UseSrun = sigs, &bytes.Buffer{}, &stderr, "no"
			done := make(chan error, 1)
			go func() { done <- Run(t.Context(), cfg) }()
			for end := time.Now().Add(20 * time.Second); !tc.begun(); time.Sleep(10 * time.Millisecond) {
				select {
				case err := <-done:
					t.Fatalf("Run returned before the signal: %v\n%s", err, stderr.String())
				default:
				}
				if time.Now().After(end) {
					t.Fatal("the step to interrupt did not begin within 20s")
				}
			}
			start := time.Now()
			sigs <- tc.sig
			select {
			case err := <-done:
				if !errors.Is(err, ErrInterrupted) || ExitStatus(err) != 128+int(tc.sig) {
					t.Errorf("Run = %v (status %d), want interrupted, %d", err, ExitStatus(err), 128+int(tc.sig))
				}
				if want := "gorun: job interrupted by " + tc.sig.String(); !strings.Contains(stderr.String(), want) {
					t.Errorf("stderr does not say %q:\n%s", want, stderr.String())
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("Run did not return within 10s of %v", tc.sig)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("Run took %v to return after %v", d, tc.sig)
			}
		})
	}
}
