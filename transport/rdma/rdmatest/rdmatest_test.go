package rdmatest

import (
	"os"
	"testing"

	"github.com/gorun-hpc/gorun/transport/rdma"
	_ "github.com/gorun-hpc/gorun/transport/rdma/mem"
)

func TestMain(m *testing.M) {
	if os.Getenv(orphanEnv) != "" && os.Getenv(ChildEnv) == "" {
		os.Exit(orphanParent())
	}
	os.Exit(Main(m))
}

// TestConformanceMemPipe runs the table with the peer behind the control
// protocol, served from a goroutine: the child's code path, minus the
// process, since mem cannot cross processes. (The mem package runs the
// table in-process with Run.)
func TestConformanceMemPipe(t *testing.T) {
	rp, err := pipePeer("mem")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := rp.shutdown(); err != nil {
			t.Error(err)
		}
	}()
	spawn := func() (peer, func() error, error) {
		rp, err := pipePeer("mem")
		if err != nil {
			return nil, nil, err
		}
		return rp, rp.kill, nil
	}
	runCases(t, Options{Provider: "mem"}, func() peer { return rp }, spawn)
}

var _ rdma.Conn // the suite builds against the contract only
