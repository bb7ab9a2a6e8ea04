package comm

import (
	"os"
	"slices"
	"strings"

	"github.com/gorun-hpc/gorun/internal/jobenv"
	"github.com/gorun-hpc/gorun/transport/rdma"
	"github.com/gorun-hpc/gorun/transport/rdma/verbs"
)

// CheckEnv reports whether the tunables in getenv (GORUN_TRANSPORT,
// GORUN_ALGO, GORUN_TIMEOUT, GORUN_DEBUG, ...) are ones Init would accept
// for a launched job of size ranks. A launcher calls it once, before any
// rank starts, so that a bad value is reported once instead of by every
// rank. The launcher's build may lack verbs (cgo and -tags rdma) while the
// ranks' have it, so "verbs" is accepted here either way; a
// GORUN_COST_FILE that this host lacks is left to the ranks, whose hosts
// may have it, and one it has is checked.
func CheckEnv(getenv func(string) string, size int) error {
	tr := strings.ToLower(strings.TrimSpace(getenv(jobenv.Transport)))
	if _, ok := rdma.LookupProvider(tr); !ok && tr != "" && tr != "auto" && tr != verbs.Name {
		// The choices for a launched job: what reaches other processes.
		names := autoProviders(rdma.ReachHost, rdma.ReachNetwork)
		if !slices.Contains(names, verbs.Name) {
			names = append(names, verbs.Name)
		}
		return &jobenv.Error{Var: jobenv.Transport, Value: getenv(jobenv.Transport), Why: "want auto or one of " + strings.Join(names, ", ")}
	}
	if _, ok := rdma.LookupProvider(tr); !ok && tr == verbs.Name {
		getenv = hiding(getenv, jobenv.Transport)
	}
	if path := strings.TrimSpace(getenv(jobenv.CostFile)); path != "" {
		if _, err := os.Stat(path); os.IsNotExist(err) {
			// Ranks on other hosts may have it (gorun -H): each rank
			// that has not fails its own Init, naming it.
			getenv = hiding(getenv, jobenv.CostFile)
		}
	}
	t, err := readTunables(getenv)
	if err != nil {
		return err
	}
	if t.Transport != "" {
		return reachesRanks(t.Transport, jobenv.Job{Size: size})
	}
	return nil
}

// hiding is getenv with name unset.
func hiding(getenv func(string) string, name string) func(string) string {
	return func(k string) string {
		if k == name {
			return ""
		}
		return getenv(k)
	}
}
