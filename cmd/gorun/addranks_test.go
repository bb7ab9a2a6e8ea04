package main

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/gorun-hpc/gorun/launcher"
)

// A flag of gorun --add-ranks that does not parse is what it is for
// gorun itself (habits.go): one line of error and a pointer to -h, with
// status 2 (without the hints for a launch's flags); the flag package
// printed its whole usage. -h still prints the usage.
func TestAddRanksBadFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // the first line
	}{
		{[]string{"--add-ranks", "1", "--job", "j", "--nosuchflag"}, "gorun: unknown flag --nosuchflag"},
		{[]string{"--add-ranks", "x", "--job", "j"}, `gorun: invalid value "x" for flag -add-ranks`},
		{[]string{"--add-ranks=1", "--job", "j", "-timeout", "soon"}, `gorun: invalid value "soon" for flag -timeout`},
		// A launch's hint ("use -np N") would mislead here.
		{[]string{"--add-ranks", "1", "--job", "j", "--ntasks", "2"}, "gorun: unknown flag --ntasks\ngorun: run"},
	} {
		var stderr bytes.Buffer
		if st := addRanksMain(tc.args, io.Discard, &stderr); st != launcher.StatusUsage {
			t.Errorf("gorun %q: status %d, want %d", tc.args, st, launcher.StatusUsage)
		}
		out := stderr.String()
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if len(lines) > 3 || !strings.HasPrefix(out, tc.want) || !strings.HasSuffix(lines[len(lines)-1], "run 'gorun --add-ranks -h' for its flags") {
			t.Errorf("gorun %q printed:\n%s\nwant at most 3 lines, starting %q, the last pointing to gorun --add-ranks -h", tc.args, out, tc.want)
		}
	}
	for _, args := range [][]string{{"--add-ranks", "-h"}, {"--add-ranks=1", "--help"}} {
		var stderr bytes.Buffer
		if st := addRanksMain(args, io.Discard, &stderr); st != 0 || !strings.Contains(stderr.String(), "-job") {
			t.Errorf("gorun %q: status %d, printed:\n%s\nwant 0 and the usage", args, st, stderr.String())
		}
	}
}
