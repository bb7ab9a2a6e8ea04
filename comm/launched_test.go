package comm

import (
	"os"
	"strings"
	"testing"
)

// clearLaunchEnv unsets every launcher variable for the test.
func clearLaunchEnv(t *testing.T) {
	env := map[string]bool{}
	for _, kv := range os.Environ() {
		env[strings.SplitN(kv, "=", 2)[0]] = true
	}
	for _, kv := range initCleanEnv() {
		delete(env, strings.SplitN(kv, "=", 2)[0])
	}
	for k := range env {
		t.Setenv(k, "")
	}
}

// TestLaunchInfo: MPICH's Hydra variables read before Init; none set;
// a malformed size named in the error.
func TestLaunchInfo(t *testing.T) {
	clearLaunchEnv(t)
	if li, err := LaunchInfo(); err != nil || li.Launcher != "" || Launched() {
		t.Fatalf("no launcher: %+v, %v, Launched %v", li, err, Launched())
	}
	t.Setenv("PMI_RANK", "1")
	t.Setenv("PMI_SIZE", "3")
	t.Setenv("MPI_LOCALRANKID", "1")
	t.Setenv("MPI_LOCALNRANKS", "2")
	li, err := LaunchInfo()
	if want := (Launch{Launcher: "mpich", Rank: 1, Size: 3, LocalRank: 1, LocalSize: 2}); err != nil || li != want {
		t.Fatalf("Hydra: %+v, %v; want %+v", li, err, want)
	}
	t.Setenv("PMI_SIZE", "three")
	if _, err := LaunchInfo(); err == nil || !strings.Contains(err.Error(), "PMI_SIZE") {
		t.Fatalf("malformed PMI_SIZE: %v", err)
	}
}
