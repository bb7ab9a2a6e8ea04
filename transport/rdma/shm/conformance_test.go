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
}
