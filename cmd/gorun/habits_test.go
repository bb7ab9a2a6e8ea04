package main

import (
	"bytes"
	"errors"
	"io"
	"os/exec"
	"strings"
	"testing"
)

// A flag gorun does not take is one line of error, a hint for the habits
// of mpirun, mpiexec, srun and torchrun, and a pointer to gorun -h; the
// flag package printed the whole usage (80 lines) and no hint.
func TestBadFlagHint(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // in the hint line
	}{
		{[]string{"--mca", "btl", "tcp", "prog"}, "GORUN_* variables"},
		{[]string{"-mca", "btl", "tcp", "prog"}, "GORUN_* variables"},
		{[]string{"-ppn", "4", "prog"}, "--npernode N"},
		{[]string{"--nproc-per-node", "4", "prog"}, "-np N"},
		{[]string{"--nproc_per_node=4", "prog"}, "-np N"},
		{[]string{"--ntasks-per-node", "4", "prog"}, "--npernode N"},
		{[]string{"-genv", "A", "1", "prog"}, "-x VAR=value"},
		{[]string{"--master-addr", "n0", "prog"}, "--seed HOST:PORT"},
		{[]string{"--nnodes", "1:4", "prog"}, "--elastic --min-np MIN --max-np MAX"},
		{[]string{"-np", "1", "./a", ":", "-ppn", "2", "./b"}, "--npernode N"},
		{[]string{"--nosuchflag", "prog"}, ""},
	} {
		var stderr bytes.Buffer
		_, err := parseArgs(tc.args, io.Discard, &stderr)
		var fe *flagError
		if !errors.As(err, &fe) {
			t.Errorf("gorun %q: %v, want a flag error", tc.args, err)
			continue
		}
		lines := strings.Split(fe.Error(), "\n")
		if len(lines) > 3 || !strings.HasSuffix(lines[len(lines)-1], "run 'gorun -h' for gorun's flags") {
			t.Errorf("gorun %q: %q, want at most 3 lines, the last pointing to gorun -h", tc.args, fe.Error())
		}
		if tc.want != "" && !strings.Contains(fe.hint, tc.want) || tc.want == "" && fe.hint != "" {
			t.Errorf("gorun %q: hint %q, want one with %q", tc.args, fe.hint, tc.want)
		}
		if stderr.Len() > 0 {
			t.Errorf("gorun %q printed %d bytes of usage", tc.args, stderr.Len())
		}
	}
	// A hint is for a flag gorun does not take: one it takes never gets
	// to the hint.
	for name := range habits {
		_, err := parseArgs([]string{"-" + name + "=1", "prog"}, io.Discard, io.Discard)
		var fe *flagError
		if !errors.As(err, &fe) || !strings.HasPrefix(fe.msg, "unknown flag") {
			t.Errorf("gorun takes -%s (%v): its hint %q is never shown", name, err, habits[name])
		}
	}
	// gorun -h still prints the whole usage.
	var usage bytes.Buffer
	if _, err := parseArgs([]string{"-h"}, io.Discard, &usage); !isHelp(err) || !strings.Contains(usage.String(), "-npernode") {
		t.Errorf("gorun -h: %v, usage %q", err, usage.String())
	}
}

// What the user sees: three lines on stderr and status 2.
func TestBadFlagShort(t *testing.T) {
	cmd := gorunProgram(t, "/bin/true", "--mca", "btl", "tcp")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Errorf("gorun --mca: %v, want status 2", err)
	}
	want := "gorun: unknown flag --mca\ngorun: Open MPI's MCA parameters"
	if lines := strings.Count(stderr.String(), "\n"); lines != 3 || !strings.HasPrefix(stderr.String(), want) {
		t.Errorf("gorun --mca printed %d lines, want 3 starting %q:\n%s", lines, want, stderr.String())
	}
}
