package comm

import (
	"github.com/gorun-hpc/gorun/internal/jobenv"
)

// CheckEnv reports whether the tunables in getenv (GORUN_TRANSPORT,
// GORUN_ALGO, GORUN_TIMEOUT, GORUN_DEBUG, ...) are ones Init would accept
// for a launched job of size ranks. A launcher calls it once, before any
// rank starts, so that a bad value is reported once instead of by every
// rank.
func CheckEnv(getenv func(string) string, size int) error {
	t, err := readTunables(getenv)
	if err != nil {
		return err
	}
	if t.Transport != "" {
		return reachesRanks(t.Transport, jobenv.Job{Size: size})
	}
	return nil
}
