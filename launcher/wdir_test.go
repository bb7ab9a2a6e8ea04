package launcher

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// -wdir: every rank runs in the directory given.
func TestWorkDir(t *testing.T) {
	dir := t.TempDir()
	out, stderr, err := runJob(t, "args", Config{NP: 2, WorkDir: dir, NoTag: true})
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	want, _ := filepath.EvalSymlinks(dir)
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var r struct{ Cwd string }
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		if got, _ := filepath.EvalSymlinks(r.Cwd); got != want {
			t.Errorf("rank ran in %s, want %s", r.Cwd, want)
		}
	}
}

// --output-filename DIR: one log per rank, untagged, besides the tagged
// console output.
func TestOutputFilename(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "logs")
	out, stderr, err := runJob(t, "env", Config{NP: 3, OutputDir: dir})
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	for r := range 3 {
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("rank.%d", r), "stdout"))
		if err != nil {
			t.Fatal(err)
		}
		line := fmt.Sprintf("%s=%d", EnvRank, r)
		if !strings.Contains(string(b), line+"\n") || strings.Contains(string(b), "[") {
			t.Errorf("rank.%d/stdout lacks %q or is tagged:\n%s", r, line, b)
		}
		if !strings.Contains(out, fmt.Sprintf("[%d] %s", r, line)) {
			t.Errorf("console lacks rank %d's tagged line:\n%s", r, out)
		}
		if _, err := os.Stat(filepath.Join(dir, fmt.Sprintf("rank.%d", r), "stderr")); err != nil {
			t.Error(err)
		}
	}
}

// A rank restarted by --max-restarts adds to its --output-filename files:
// the output of the start that failed, its reason above all, stays.
func TestOutputFilenameRestartedRank(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "logs")
	script := `echo "start ${GORUN_RESTART:-0}"; ` +
		`if [ "$GORUN_RANK" = 1 ] && [ -z "$GORUN_RESTART" ]; then echo "why it failed" >&2; exit 5; fi`
	_, stderr, err := runJob(t, "", Config{NP: 2, OutputDir: dir, Elastic: true, MaxRestarts: 1,
		Program: "/bin/sh", Args: []string{"-c", script}})
	if err != nil || !strings.Contains(stderr, "restarted it") {
		t.Fatalf("Run = %v, want rank 1 restarted and success\n%s", err, stderr)
	}
	for name, want := range map[string]string{"stdout": "start 0\nstart 1\n", "stderr": "why it failed\n"} {
		b, err := os.ReadFile(filepath.Join(dir, "rank.1", name))
		if err != nil || string(b) != want {
			t.Errorf("rank.1/%s = %q (%v), want %q", name, b, err, want)
		}
	}
}

// A relative -wdir is a directory under gorun's for every rank: a remote
// rank's command starts in the home directory there (sshd), where
// "cd sub" failed, or found another directory.
func TestWorkDirRelative(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	want, _ := filepath.EvalSymlinks(filepath.Join(dir, "sub"))
	for _, where := range []string{"local", "remote"} {
		cfg := Config{NP: 1, WorkDir: "sub", NoTag: true}
		if where == "remote" {
			cfg.Hosts, cfg.LaunchAgent = []Host{{Name: "node1", Slots: 1}}, fakeSSHAgent(t)
		}
		out, stderr, err := runJob(t, "args", cfg)
		if err != nil {
			t.Errorf("%s: %v\n%s", where, err, stderr)
			continue
		}
		var r struct{ Cwd string }
		if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &r); err != nil {
			t.Fatalf("%s: %q: %v", where, out, err)
		}
		if got, _ := filepath.EvalSymlinks(r.Cwd); got != want {
			t.Errorf("%s: the rank ran in %s, want %s", where, r.Cwd, want)
		}
	}
}

// With -wdir, a relative Go package PROGRAM is the package under it, as
// a relative binary is (mpirun resolves a relative program after changing
// to -wdir); gorun built the package of its own directory, or, with none
// there, ran the directory. A package in gorun's directory but not under
// -wdir is an error that says so.
func TestWorkDirGoPackage(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go build")
	}
	wdir, here := t.TempDir(), t.TempDir()
	writePackage(t, filepath.Join(wdir, "pkg"), "under -wdir")
	t.Chdir(here)
	out, stderr, err := runJob(t, "", Config{NP: 1, WorkDir: wdir, Program: "./pkg", NoTag: true})
	if err != nil || out != "under -wdir\n" {
		t.Fatalf("./pkg with -wdir: %v, output %q, want the package under -wdir to run\n%s", err, out, stderr)
	}
	os.RemoveAll(filepath.Join(wdir, "pkg"))
	writePackage(t, filepath.Join(here, "pkg"), "in gorun's directory")
	out, _, err = runJob(t, "", Config{NP: 1, WorkDir: wdir, Program: "./pkg", NoTag: true})
	if !errors.Is(err, ErrLaunch) || !strings.Contains(err.Error(), "not under -wdir") {
		t.Errorf("./pkg only in gorun's directory, with -wdir: %v, output %q; want an error that it is not under -wdir", err, out)
	}
}

// writePackage writes a main package, its own module, that prints msg.
func writePackage(t *testing.T, dir, msg string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	src := fmt.Sprintf("package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(%q) }\n", msg)
	for name, body := range map[string]string{"go.mod": "module example.com/pkg\n\ngo 1.21\n", "main.go": src} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// writeCounter keeps what is written and counts the writes.
type writeCounter struct {
	n int
	b strings.Builder
}

func (w *writeCounter) Write(p []byte) (int, error) { w.n++; return w.b.Write(p) }

// A rank's --output-filename file gets one write per read of its output,
// not one per line: a rank that prints many short lines would otherwise
// cost gorun a system call for each.
func TestOutputFileWritesPerRead(t *testing.T) {
	var file writeCounter
	w := newRankWriter(&console{stdout: io.Discard, stderr: io.Discard}, io.Discard, 0, true)
	w.file = &file
	chunk := strings.Repeat("a line\n", 1000) + "and a part"
	w.Write([]byte(chunk))
	w.Flush()
	if file.n != 2 || file.b.String() != chunk {
		t.Errorf("%d writes of %d bytes, want 2 (the lines, then the last part) of the %d written", file.n, file.b.Len(), len(chunk))
	}
}

// A Go package PROGRAM of a job with ranks on other hosts is built under
// -wdir, which the hosts share, not under gorun's own directory, which
// they may not see (before 2026-12-01 it was always gorun's directory).
func TestWorkDirGoPackageRemoteBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go build")
	}
	wdir, here := t.TempDir(), t.TempDir()
	dir := filepath.Join(wdir, "pkg")
	writePackage(t, dir, "")
	src := "package main\n\nimport (\n\t\"fmt\"\n\t\"os\"\n)\n\nfunc main() { p, _ := os.Executable(); fmt.Println(p) }\n"
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(here)
	for _, how := range []string{"ssh", "srun"} {
		cfg := Config{NP: 1, WorkDir: wdir, Program: "./pkg", NoTag: true}
		var out, stderr string
		var err error
		if how == "ssh" {
			cfg.Hosts, cfg.LaunchAgent = []Host{{Name: "node1", Slots: 1}}, fakeSSHAgent(t)
			out, stderr, err = runJob(t, "", cfg)
		} else {
			fakeSlurm(t)
			var o, e strings.Builder
			cfg.UseSrun, cfg.Stdout, cfg.Stderr = "yes", &o, &e
			err = Run(t.Context(), cfg)
			out, stderr = o.String(), e.String()
		}
		if err != nil {
			t.Fatalf("%s: ./pkg with -wdir: %v\n%s", how, err, stderr)
		}
		f := strings.Fields(out)
		if len(f) == 0 {
			t.Fatalf("%s: no output\n%s", how, stderr)
		}
		bin := f[len(f)-1] // removed with its directory by now
		got, _ := filepath.EvalSymlinks(filepath.Dir(filepath.Dir(bin)))
		if want, _ := filepath.EvalSymlinks(wdir); got != want {
			t.Errorf("%s: the rank ran %s, want a build under -wdir %s", how, bin, wdir)
		}
		if m, _ := filepath.Glob(filepath.Join(wdir, ".gorun-build-*")); len(m) > 0 {
			t.Errorf("%s: the build is left behind: %v", how, m)
		}
	}
}
