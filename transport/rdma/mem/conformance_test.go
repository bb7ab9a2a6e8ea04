package mem_test

import (
	"os"
	"testing"

	"github.com/gorun-hpc/gorun/transport/rdma/rdmatest"
)

func TestMain(m *testing.M) { os.Exit(rdmatest.Main(m)) }

// TestConformance runs the transport conformance table in-process (mem
// cannot cross a process boundary).
func TestConformance(t *testing.T) {
	rdmatest.Run(t, rdmatest.Options{Provider: "mem"})
}
