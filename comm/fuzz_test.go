package comm

import (
	"reflect"
	"strings"
	"testing"
)

// FuzzReadJobEnv: any environment either parses into a consistent job or
// fails with an *envError; never a panic.
//
//	go test -fuzz FuzzReadJobEnv ./comm
func FuzzReadJobEnv(f *testing.F) {
	f.Add("GORUN_RANK=1\nGORUN_SIZE=4\nGORUN_SEEDS=a:1,b:2")
	f.Add("SLURM_PROCID=3\nSLURM_NTASKS=8\nSLURM_LOCALID=1")
	f.Add("RANK=0\nWORLD_SIZE=2\nMASTER_ADDR=::1\nMASTER_PORT=29500")
	f.Add("OMPI_COMM_WORLD_RANK=1\nOMPI_COMM_WORLD_SIZE=2\nOMPI_COMM_WORLD_LOCAL_RANK=5\nOMPI_COMM_WORLD_LOCAL_SIZE=2")
	f.Fuzz(func(t *testing.T, s string) {
		env := map[string]string{}
		for _, line := range strings.Split(s, "\n") {
			if k, v, ok := strings.Cut(line, "="); ok {
				env[k] = v
			}
		}
		j, err := readJobEnv(mapEnv(env))
		if err != nil {
			if _, ok := err.(*envError); !ok {
				t.Fatalf("error %T %v is not an *envError", err, err)
			}
			return
		}
		if j.Source != "" && (j.Rank < 0 || j.Rank >= j.Size || (j.LocalSize > 0 && j.LocalRank >= j.LocalSize)) {
			t.Fatalf("inconsistent job %+v from %q", j, s)
		}
		for _, seed := range j.Seeds {
			if i := strings.LastIndexByte(seed, ':'); i <= 0 || i == len(seed)-1 {
				t.Fatalf("seed %q is not host:port", seed)
			}
		}
	})
}

// FuzzUnmarshalEndpoint: any blob either fails or decodes into an endpoint
// that encodes back to a blob decoding to the same endpoint.
func FuzzUnmarshalEndpoint(f *testing.F) {
	e := &endpoint{host: hostIdentity(), pid: 42, addrs: map[string]string{"tcp": "10.0.0.1:5000", "shm": "/tmp/x"}}
	b, _ := e.marshal()
	f.Add(b)
	f.Add([]byte{endpointVersion})
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := unmarshalEndpoint(b)
		if err != nil {
			return
		}
		b2, err := e.marshal()
		if err != nil {
			return // e.g. more than maxBlob after decoding a long input
		}
		e2, err := unmarshalEndpoint(b2)
		if err != nil || !reflect.DeepEqual(e, e2) {
			t.Fatalf("round trip: %+v -> %v, %+v", e, err, e2)
		}
	})
}
