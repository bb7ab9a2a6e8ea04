//go:build !(linux && cgo && rdma)

package verbs

import (
	"errors"
	"slices"
	"testing"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

func TestStubNotSupported(t *testing.T) {
	if Supported {
		t.Fatal("Supported is true in the stub build")
	}
	_, err := Open(rdma.Config{})
	if !errors.Is(err, rdma.ErrNotSupported) {
		t.Fatalf("Open: %v, want ErrNotSupported", err)
	}
	if slices.Contains(rdma.Providers(), "verbs") {
		t.Fatal(`the stub build registered "verbs"`)
	}
	if _, err := rdma.Open("verbs"); !errors.Is(err, rdma.ErrUnknownProvider) {
		t.Fatalf(`rdma.Open("verbs"): %v, want ErrUnknownProvider`, err)
	}
}
