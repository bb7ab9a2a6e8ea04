package tcp

import (
	"os"
	"testing"

	"github.com/gorun-hpc/gorun/transport/rdma"
	"github.com/gorun-hpc/gorun/transport/rdma/rdmatest"
)

// TestMain lets the conformance suite and the ping-pong benchmark re-run
// this binary as their peer.
func TestMain(m *testing.M) {
	if mode := os.Getenv(pingPongEnv); mode != "" {
		os.Exit(pingPongPeer(mode))
	}
	os.Exit(rdmatest.Main(m))
}

func TestConformance(t *testing.T) {
	rdmatest.Run(t, rdmatest.Options{Provider: "tcp", CrossProcess: true})
}

// The suite again with a job token: every connection authenticates, the
// child peer included (it gets the token with its config).
func TestConformanceToken(t *testing.T) {
	if testing.Short() {
		t.Skip("the token run repeats the suite")
	}
	rdmatest.Run(t, rdmatest.Options{Provider: "tcp", CrossProcess: true, Config: rdma.Config{Token: []byte("conformance")}})
}

// The suite again with CRC32C on every frame (GORUN_CHECKSUM=1), the
// child peer included.
func TestConformanceChecksum(t *testing.T) {
	rdmatest.Run(t, rdmatest.Options{Provider: "tcp", CrossProcess: true, Config: rdma.Config{Checksum: true}})
}
