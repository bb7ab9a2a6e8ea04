package comm

import (
	"context"
	"errors"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/collectives"
	"github.com/gorun-hpc/gorun/internal/engine"
	"github.com/gorun-hpc/gorun/internal/numa"
)

func mapEnv(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestReadJobEnv(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want jobEnv
		err  string // substring of the error; "" = no error
	}{
		{name: "none", env: map[string]string{}, want: jobEnv{Rank: -1, Size: -1, LocalRank: -1, LocalSize: -1}},
		{name: "gorun", env: map[string]string{"GORUN_RANK": "3", "GORUN_SIZE": "8", "GORUN_LOCAL_RANK": "1", "GORUN_LOCAL_SIZE": "2",
			"GORUN_SEEDS": "10.0.0.1:7946, 10.0.0.2:7946", "GORUN_JOB_ID": "j1", "GORUN_JOB_TOKEN": "s3cret"},
			want: jobEnv{Source: "gorun", Rank: 3, Size: 8, LocalRank: 1, LocalSize: 2, Seeds: []string{"10.0.0.1:7946", "10.0.0.2:7946"}, JobID: "j1", Token: "s3cret"}},
		{name: "gorun wins over slurm", env: map[string]string{"GORUN_RANK": "0", "GORUN_SIZE": "2", "SLURM_PROCID": "5", "SLURM_NTASKS": "9"},
			want: jobEnv{Source: "gorun", Rank: 0, Size: 2, LocalRank: -1, LocalSize: -1}},
		{name: "openmpi", env: map[string]string{"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "GORUN_SEEDS": "h:1"},
			want: jobEnv{Source: "openmpi", Rank: 2, Size: 4, LocalRank: 0, LocalSize: 2, Seeds: []string{"h:1"}}},
		{name: "slurm", env: map[string]string{"SLURM_PROCID": "7", "SLURM_NTASKS": "16", "SLURM_LOCALID": "3", "SLURM_NODELIST": "node[01-04]", "SLURM_JOB_ID": "123"},
			want: jobEnv{Source: "slurm", Rank: 7, Size: 16, LocalRank: 3, LocalSize: -1, JobID: "123", NodeList: "node[01-04]", Seeds: []string{"node01:20123"}}},
		{name: "torchrun", env: map[string]string{"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "10.1.1.1", "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "r9"},
			want: jobEnv{Source: "torchrun", Rank: 1, Size: 2, LocalRank: 1, LocalSize: 2, Seeds: []string{"10.1.1.1:29501"}, JobID: "r9"}},
		{name: "torchrun ipv6 master", env: map[string]string{"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "fe80::1", "MASTER_PORT": "1"},
			want: jobEnv{Source: "torchrun", Rank: 0, Size: 1, LocalRank: -1, LocalSize: -1, Seeds: []string{"[fe80::1]:2"}}},
		{name: "rank not a number", env: map[string]string{"GORUN_RANK": "x", "GORUN_SIZE": "2"}, err: "GORUN_RANK=\"x\": not an integer"},
		{name: "rank missing", env: map[string]string{"GORUN_SIZE": "2"}, err: "GORUN_RANK"},
		{name: "rank too big", env: map[string]string{"GORUN_RANK": "2", "GORUN_SIZE": "2"}, err: "not below GORUN_SIZE=2"},
		{name: "negative rank", env: map[string]string{"SLURM_PROCID": "-1", "SLURM_NTASKS": "2"}, err: "SLURM_PROCID=\"-1\": must be at least 0"},
		{name: "zero size", env: map[string]string{"GORUN_RANK": "0", "GORUN_SIZE": "0"}, err: "GORUN_SIZE=\"0\": must be at least 1"},
		{name: "local rank too big", env: map[string]string{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "2", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}, err: "OMPI_COMM_WORLD_LOCAL_RANK"},
		{name: "bad seed", env: map[string]string{"GORUN_RANK": "0", "GORUN_SIZE": "1", "GORUN_SEEDS": "a:1,noport"}, err: "\"noport\" is not host:port"},
		{name: "empty seed", env: map[string]string{"GORUN_RANK": "0", "GORUN_SIZE": "1", "GORUN_SEEDS": "a:1,,b:2"}, err: "empty address"},
		{name: "master port alone", env: map[string]string{"RANK": "0", "WORLD_SIZE": "1", "MASTER_PORT": "1"}, err: "MASTER_ADDR"},
		{name: "master port not a number", env: map[string]string{"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "h", "MASTER_PORT": "http"}, err: "MASTER_PORT"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := readJobEnv(mapEnv(tt.env))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want one containing %q", err, tt.err)
				}
				var ee *envError
				if !errors.As(err, &ee) {
					t.Fatalf("error %T is not an *envError", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestReadTunables(t *testing.T) {
	tests := []struct {
		env  map[string]string
		want tunables
		err  string
	}{
		{env: map[string]string{}, want: tunables{}},
		{env: map[string]string{"GORUN_TRANSPORT": "TCP", "GORUN_TIMEOUT": "90s", "GORUN_DEBUG": "trace", "GORUN_SOCKET_IFNAME": "eth1"},
			want: tunables{Transport: "tcp", Timeout: 90 * time.Second, HasTimeout: true, Debug: debugTrace, SocketIfname: "eth1"}},
		{env: map[string]string{"GORUN_TIMEOUT": "2.5"}, want: tunables{Timeout: 2500 * time.Millisecond, HasTimeout: true}},
		{env: map[string]string{"GORUN_TIMEOUT": "0"}, want: tunables{HasTimeout: true}},
		{env: map[string]string{"GORUN_ALGO": "allreduce:ring,broadcast:chain"},
			want: tunables{Algos: map[collectives.Collective]collectives.Algo{collectives.AllReduce: collectives.Ring, collectives.Broadcast: collectives.Chain}}},
		{env: map[string]string{"GORUN_TRANSPORT": "infiniband"}, err: "GORUN_TRANSPORT"},
		{env: map[string]string{"GORUN_TIMEOUT": "soon"}, err: "GORUN_TIMEOUT"},
		{env: map[string]string{"GORUN_TIMEOUT": "-1s"}, err: "negative"},
		{env: map[string]string{"GORUN_DEBUG": "loud"}, err: "GORUN_DEBUG"},
		{env: map[string]string{"GORUN_ALGO": "allreduce:chain"}, err: "allreduce has no algorithm"},
		{env: map[string]string{"GORUN_ALGO": "allreduce:"}, err: "GORUN_ALGO"},
		{env: map[string]string{"GORUN_ALGO": "frobnicate:ring"}, err: "unknown collective"},
		{env: map[string]string{"GORUN_PROBE_INTERVAL": " 1s "}, want: tunables{Probe: time.Second}},
		{env: map[string]string{"GORUN_PROBE_INTERVAL": "1"}, err: "GORUN_PROBE_INTERVAL"},    // seconds need a unit
		{env: map[string]string{"GORUN_PROBE_INTERVAL": "10ms"}, err: "GORUN_PROBE_INTERVAL"}, // below 50ms
		{env: map[string]string{"GORUN_PROBE_INTERVAL": "2m"}, err: "from 50ms to 1m "},
	}
	for _, tt := range tests {
		got, err := readTunables(mapEnv(tt.env))
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%v: error %v, want one containing %q", tt.env, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%v: %v", tt.env, err)
			continue
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%v: got %+v, want %+v", tt.env, got, tt.want)
		}
	}
}

func TestNewConfigOrder(t *testing.T) {
	old := osGetenv
	defer func() { osGetenv = old }()
	osGetenv = mapEnv(map[string]string{"GORUN_TIMEOUT": "7s", "GORUN_ALGO": "allreduce:tree", "GORUN_TRANSPORT": "shm"})
	c, err := newConfig(WithTimeout(3 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if c.timeout != 3*time.Second || c.algos[collectives.AllReduce] != collectives.Tree || c.transport != "shm" {
		t.Fatalf("config %+v: option must win over env, env over default", c)
	}
	if _, err := newConfig(WithTransport("carrier-pigeon")); err == nil {
		t.Fatal("bad transport accepted")
	}
	if _, err := newConfig(WithAlgorithm("broadcast:ring")); err == nil {
		t.Fatal("broadcast:ring accepted")
	}
}

// Ranks in one process are goroutines sharing its threads: an idle poll
// hands the thread to them (engine.WaitPolicy.InProcess), never the CPU to
// other processes, however many ranks there are; a job's ranks yield the
// CPU where they outnumber the CPUs. GORUN_YIELD-style settings still win.
func TestWaitPolicyInProcess(t *testing.T) {
	many := 4 * runtime.NumCPU()
	local := config{local: true, localRanks: many}
	if p := local.waitPolicy(); !p.InProcess || p.Yield || p.Spin <= 0 {
		t.Errorf("NewLocal's %d ranks: policy %+v, want InProcess, no Yield, a spin", many, p)
	}
	job := config{localRanks: many}
	if p := job.waitPolicy(); p.InProcess || !p.Yield {
		t.Errorf("a job's %d local ranks: policy %+v, want Yield and not InProcess", many, p)
	}
	forced := config{local: true, localRanks: many, yield: 1}
	if p := forced.waitPolicy(); !p.Yield {
		t.Errorf("NewLocal with yield forced on: policy %+v, want Yield", p)
	}
}

// Ranks that the launcher counts on different hosts but that run on one
// kernel's CPUs (namespace hosts, containers) yield where they outnumber
// those CPUs: 2 hosts × 2 ranks on 2 CPUs is 4 ranks on 2.
func TestWaitPolicyCPUSharers(t *testing.T) {
	for _, c := range []struct {
		cfg  config
		want bool
	}{
		{config{localRanks: 2, cpuSharers: 4, cpus: 2}, true},
		{config{localRanks: 2, cpuSharers: 2, cpus: 2}, false},
		{config{localRanks: 2, cpuSharers: 0, cpus: 0}, false}, // unknown
		{config{localRanks: 1, cpuSharers: 2, cpus: 1}, true},  // two ranks bound to one core
		{config{localRanks: 2, cpuSharers: 4, cpus: 2, yield: -1}, false},
		{config{local: true, localRanks: 8, cpuSharers: 8, cpus: 2}, false}, // in one process: InProcess instead
	} {
		if p := c.cfg.waitPolicy(); p.Yield != c.want || p.Spin != engine.DefaultSpin && !c.cfg.local {
			t.Errorf("%+v: Yield %v spin %v, want %v and the default spin", c.cfg, p.Yield, p.Spin, c.want)
		}
	}
	// Some of them on other hosts of this kernel: a short spin.
	away := config{localRanks: 2, cpuSharers: 4, cpuSharersAway: 2, cpus: 2}
	if p := away.waitPolicy(); !p.Yield || p.Spin != 100*time.Microsecond {
		t.Errorf("%+v: policy %+v, want Yield and a 100us spin", away, p)
	}
	away.spin, away.hasSpin = time.Millisecond, true // GORUN_SPIN wins
	if p := away.waitPolicy(); p.Spin != time.Millisecond {
		t.Errorf("%+v: spin %v, want GORUN_SPIN's 1ms", away, p.Spin)
	}
	// Init counts them from the rendezvous: ranks in one process share
	// its CPUs.
	cpus, err := numa.Affinity(0)
	if err != nil {
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cs, err := NewLocal(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		if c.cfg.cpuSharers != 3 || c.cfg.cpuSharersAway != 0 || c.cfg.cpus != len(cpus) {
			t.Errorf("rank %d: %d ranks on its %d CPUs, want 3 on %d", c.Rank(), c.cfg.cpuSharers, c.cfg.cpus, len(cpus))
		}
	}
	// A communicator split from it keeps the count: the others still run.
	subs := make([]*Comm, len(cs))
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Go(func() { subs[i], errs[i] = c.Split(ctx, c.Rank()/2, 0) })
	}
	wg.Wait()
	for i, c := range cs {
		if errs[i] != nil {
			t.Fatalf("rank %d: split: %v", i, errs[i])
		}
		if s := subs[i]; s.cfg.cpuSharers != 3 {
			t.Errorf("rank %d: its split communicator of %d counts %d ranks on its CPUs, want 3", i, s.Size(), s.cfg.cpuSharers)
		}
		subs[i].Close()
		c.Close()
	}
}
