package comm

import (
	"context"
	"sync"
	"testing"
	"time"
)

func TestChecksumTunable(t *testing.T) {
	for in, want := range map[string]bool{"": false, "0": false, "1": true, "true": true} {
		tn, err := readTunables(func(k string) string {
			if k == "GORUN_CHECKSUM" {
				return in
			}
			return ""
		})
		if err != nil || tn.Checksum != want {
			t.Errorf("GORUN_CHECKSUM=%q: %v, %v; want %v", in, tn.Checksum, err, want)
		}
	}
	if _, err := readTunables(func(k string) string {
		if k == "GORUN_CHECKSUM" {
			return "maybe"
		}
		return ""
	}); err == nil {
		t.Error("GORUN_CHECKSUM=maybe accepted")
	}
}

// With WithChecksum every tcp frame carries a CRC32C; collectives still
// give the right answer (the corruption cases are the tcp provider's and
// reliability/'s tests).
func TestAllReduceWithChecksum(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := NewLocal(ctx, 3, WithTransport("tcp"), WithChecksum())
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(cs))
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v := make([]int64, 100000)
			for j := range v {
				v[j] = int64(i * j)
			}
			if errs[i] = AllReduce(ctx, c, v, v, Sum); errs[i] == nil && v[99999] != 3*99999 {
				t.Errorf("rank %d: v[99999] = %d", i, v[99999])
			}
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	for _, c := range cs {
		c.Close()
	}
}
