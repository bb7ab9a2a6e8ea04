package faulty

import (
	"bytes"
	"log"
	"os"
	"strings"
	"testing"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// A rank's active fault is logged once in a process, however many devices
// it wraps (a rank opens one per provider, and more in each Shrink): the
// launcher printed "GORUN_FAULT active" twice for every rank of
// examples/train.
func TestFaultAnnouncedOnce(t *testing.T) {
	var buf bytes.Buffer
	log.SetOutput(&buf)
	t.Cleanup(func() { log.SetOutput(os.Stderr) })
	const spec = "rank=7:kill:write:9999"
	for _, rank := range []int{7, 7, 7, 8} {
		dev, err := rdma.Open("mem")
		if err != nil {
			t.Fatal(err)
		}
		w, err := wrapSpec(dev, spec, rank)
		if err != nil {
			t.Fatal(err)
		}
		w.Close()
	}
	if n := strings.Count(buf.String(), "GORUN_FAULT active"); n != 1 {
		t.Fatalf("logged %d times, want once (rank 7; rank 8 has no rule):\n%s", n, buf.String())
	}
	if !strings.Contains(buf.String(), "gorun rank 7:") {
		t.Fatalf("the line does not name rank 7:\n%s", buf.String())
	}
}
