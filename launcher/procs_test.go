package launcher

import (
	"os"
	"runtime"
	"slices"
	"strconv"
	"testing"
)

func TestLocalEnvGOMAXPROCS(t *testing.T) {
	os.Unsetenv("GOMAXPROCS")
	env := localEnv([]string{EnvLocalSize + "=2", EnvRank + "=0"})
	want := "GOMAXPROCS=" + strconv.Itoa(max(1, runtime.NumCPU()/2))
	if !slices.Contains(env, want) {
		t.Errorf("2 local ranks: no %s in the rank's environment", want)
	}
	// The user's choice wins, from gorun's environment or from -x.
	t.Setenv("GOMAXPROCS", "3")
	env = localEnv([]string{EnvLocalSize + "=2"})
	if slices.Contains(env, want) || !slices.Contains(env, "GOMAXPROCS=3") {
		t.Errorf("GOMAXPROCS=3 in gorun's environment was overridden: %v", env)
	}
	os.Unsetenv("GOMAXPROCS")
	env = localEnv([]string{EnvLocalSize + "=2", "GOMAXPROCS=5"})
	if slices.Contains(env, want) {
		t.Errorf("-x GOMAXPROCS=5 was overridden")
	}
}
