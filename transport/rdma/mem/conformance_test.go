package mem_test

import (
	"os"
	"runtime"
	"testing"

	"github.com/gorun-hpc/gorun/transport/rdma/rdmatest"
)

func TestMain(m *testing.M) { os.Exit(rdmatest.Main(m)) }

// TestConformance runs the transport conformance table in-process (mem
// cannot cross a process boundary), then checks that the whole table,
// error states and RNR waits included, left no goroutine behind.
func TestConformance(t *testing.T) {
	before := runtime.NumGoroutine()
	rdmatest.Run(t, rdmatest.Options{Provider: "mem"})
	waitGoroutines(t, before)
}
