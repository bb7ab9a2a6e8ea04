//go:build linux

package shm

import (
	"os"
	"testing"

	"github.com/gorun-hpc/gorun/transport/rdma/rdmatest"
)

func TestMain(m *testing.M) { os.Exit(rdmatest.Main(m)) }

func TestConformance(t *testing.T) {
	t.Run("in-process", func(t *testing.T) {
		rdmatest.Run(t, rdmatest.Options{Provider: "shm"})
	})
	t.Run("cross-process", func(t *testing.T) {
		rdmatest.Run(t, rdmatest.Options{Provider: "shm", CrossProcess: true})
	})
	// Without cross-memory attach (as under Yama ptrace_scope 2): the
	// registered-memory paths go through the peer. The child inherits the
	// environment.
	t.Run("cma=off", func(t *testing.T) {
		if testing.Short() {
			t.Skip("the fallback path is also covered by TestCrossProcess/cma=0")
		}
		t.Setenv("GORUN_SHM_CMA", "0")
		rdmatest.Run(t, rdmatest.Options{Provider: "shm", CrossProcess: true})
	})
	// The child without membarrier: every connection then publishes with
	// locked exchanges (fence.go), both ends, whatever this process does.
	t.Run("membarrier=off", func(t *testing.T) {
		t.Setenv("GORUN_SHM_MEMBARRIER", "0")
		rdmatest.Run(t, rdmatest.Options{Provider: "shm", CrossProcess: true})
	})
}
