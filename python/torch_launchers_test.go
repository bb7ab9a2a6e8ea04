package python_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"slices"
	"testing"

	"github.com/gorun-hpc/gorun/internal/jobenv"
)

// launchersOf reads _LAUNCHERS, the (rank, size, local rank) variables
// of each launcher, from torch_backend.py with Python's own parser (no
// torch needed).
const launchersOf = `import ast, json, sys
for node in ast.parse(open(sys.argv[1]).read()).body:
    if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["_LAUNCHERS"]:
        print(json.dumps(ast.literal_eval(node.value)))
        break
else:
    sys.exit("no _LAUNCHERS = [...] in " + sys.argv[1])
`

// TestTorchLaunchersMatchJobenv: the torch backend's _derive_env makes
// torch's RANK, WORLD_SIZE and LOCAL_RANK from the variables of the
// launcher that started the rank, before init_process_group, so before
// gorun_init, and the C ABI tells nothing of the job until then: it keeps
// its own list of launchers (_LAUNCHERS). This holds the list to
// internal/jobenv, the owner of the environment contract: every launcher
// whose variables mark a launched process for jobenv (but torchrun, whose
// RANK and WORLD_SIZE torch reads itself) is in the list; each entry
// names that launcher's rank, size and local-rank variables as
// jobenv.Read reads them; and the list is in jobenv's order, so that
// where two launchers' variables are set (mpirun inside a Slurm
// allocation) both take the same one.
func TestTorchLaunchersMatchJobenv(t *testing.T) {
	if _, err := os.Stat(python); err != nil {
		t.Skipf("%s: %v", python, err)
	}
	out, err := exec.Command(python, "-c", launchersOf, "gorun/torch_backend.py").CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var list [][3]string
	if err := json.Unmarshal(out, &list); err != nil {
		t.Fatalf("_LAUNCHERS is not a list of (rank, size, local rank) names: %v\n%s", err, out)
	}
	listed := map[string]bool{}
	for _, l := range list {
		listed[l[0]], listed[l[1]] = true, true
	}
	torchrun := []string{jobenv.RankVar(jobenv.LauncherTorchrun), jobenv.SizeVar(jobenv.LauncherTorchrun)}

	// The variables by which jobenv tells that a launcher started the
	// process: each launcher's size variable, and the rank variable of
	// those whose rank variable alone marks it.
	var marks []string
	jobenv.Launched(func(name string) string {
		marks = append(marks, name)
		return ""
	})
	if len(marks) == 0 {
		t.Fatal("jobenv.Launched looked at no variable")
	}
	for _, m := range marks {
		if !listed[m] && !slices.Contains(torchrun, m) {
			t.Errorf("jobenv takes %s for a launcher's, which torch_backend.py's _LAUNCHERS lacks", m)
		}
	}

	env := func(vars map[string]string) func(string) string {
		return func(name string) string { return vars[name] }
	}
	for i, l := range list {
		rank, size, local := l[0], l[1], l[2]
		if !slices.Contains(marks, size) {
			t.Errorf("_LAUNCHERS has %v, but jobenv takes no %s for a launcher's", l, size)
			continue
		}
		j, err := jobenv.Read(env(map[string]string{rank: "1", size: "3", local: "2"}))
		if err != nil {
			t.Errorf("_LAUNCHERS has %v: jobenv.Read of %s=1 %s=3 %s=2: %v", l, rank, size, local, err)
			continue
		}
		if jobenv.RankVar(j.Source) != rank || jobenv.SizeVar(j.Source) != size || j.Rank != 1 || j.Size != 3 {
			t.Errorf("_LAUNCHERS has %v; jobenv reads launcher %q from %s and %s: rank %d of %d",
				l, j.Source, jobenv.RankVar(j.Source), jobenv.SizeVar(j.Source), j.Rank, j.Size)
		}
		if j.LocalRank != 2 {
			t.Errorf("_LAUNCHERS has %v; jobenv reads %s's local rank from another variable than %s (local rank %d)",
				l, j.Source, local, j.LocalRank)
		}
		// Where a later entry's variables are set too, jobenv takes this one.
		for _, k := range list[i+1:] {
			both := map[string]string{rank: "1", size: "3", local: "2", k[0]: "0", k[1]: "5", k[2]: "0"}
			j, err := jobenv.Read(env(both))
			if err != nil || jobenv.RankVar(j.Source) != rank {
				t.Errorf("_LAUNCHERS lists %v before %v, but with both set jobenv reads %s (%v)",
					l, k, jobenv.RankVar(j.Source), err)
			}
		}
	}
}
