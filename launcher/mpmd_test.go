package launcher

import (
	"encoding/json"
	"reflect"
	"testing"
)

// MPMD (gorun -np 1 ./a x : -np 2 ./b y z): rank 0 runs the first
// program with its arguments, ranks 1 and 2 the second, in one job.
func TestMPMD(t *testing.T) {
	bin := testBinary(t)
	out, stderr, err := runJob(t, "args", Config{NP: 3, Apps: []App{{NP: 1, Program: bin, Args: []string{"x"}},
		{NP: 2, Program: bin, Args: []string{"y", "z"}}}})
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	lines := rankLines(t, out)
	for r, want := range map[int][]string{0: {"x"}, 1: {"y", "z"}, 2: {"y", "z"}} {
		if len(lines[r]) != 1 {
			t.Fatalf("rank %d printed %q", r, lines[r])
		}
		var got struct{ Args []string }
		if err := json.Unmarshal([]byte(lines[r][0]), &got); err != nil || !reflect.DeepEqual(got.Args, want) {
			t.Errorf("rank %d ran with %q (%v), want %q", r, got.Args, err, want)
		}
	}
}
