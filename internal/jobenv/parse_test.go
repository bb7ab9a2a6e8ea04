package jobenv

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func mapEnv(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// The launcher and comm once disagreed here: node[1-2]-ib is node1-ib.
func TestFirstHost(t *testing.T) {
	for in, want := range map[string]string{
		"node1":                 "node1",
		"node1,node2":           "node1",
		"node[07-09,12]":        "node07",
		"node[07-09,12],gpu1":   "node07",
		"node[3,5-6],gpu1":      "node3",
		"node[1-2]-ib":          "node1-ib",
		"gpu[1-2]-ib,cpu1":      "gpu1-ib",
		"rack[1-2]-node[01-04]": "rack1-node01",
		"n[3]":                  "n3",
		" a ":                   "a",
		"":                      "",
		"bad[1-2":               "",
	} {
		if got := FirstHost(in); got != want {
			t.Errorf("FirstHost(%q) = %q, want %q", in, got, want)
		}
	}
	if got := SlurmNodeList(mapEnv(map[string]string{"SLURM_NODELIST": "old[1-2]", "SLURM_JOB_NODELIST": "new[1-2]"})); got != "new[1-2]" {
		t.Errorf("SlurmNodeList prefers %q, want SLURM_JOB_NODELIST", got)
	}
	if got := SlurmNodeList(mapEnv(map[string]string{"SLURM_NODELIST": "old[1-2]"})); got != "old[1-2]" {
		t.Errorf("SlurmNodeList without SLURM_JOB_NODELIST = %q", got)
	}
}

// One reading of GORUN_TIMEOUT for comm and the C ABI (capi once took 10m
// as its default, ignored "90" and treated 0 as the default).
func TestOpTimeout(t *testing.T) {
	for _, c := range []struct {
		val  string
		want time.Duration
		set  bool
		bad  bool
	}{
		{"", DefaultTimeout, false, false},
		{"90", 90 * time.Second, true, false},
		{" 2.5 ", 2500 * time.Millisecond, true, false},
		{"1m30s", 90 * time.Second, true, false},
		{"0", 0, true, false},
		{"0s", 0, true, false},
		{"-1", 0, false, true},
		{"-5s", 0, false, true},
		{"soon", 0, false, true},
	} {
		d, set, err := OpTimeout(mapEnv(map[string]string{Timeout: c.val}))
		if c.bad {
			var e *Error
			if !errors.As(err, &e) || e.Var != Timeout {
				t.Errorf("GORUN_TIMEOUT=%q: err %v, want an *Error naming GORUN_TIMEOUT", c.val, err)
			}
			continue
		}
		if err != nil || d != c.want || set != c.set {
			t.Errorf("GORUN_TIMEOUT=%q: %v %v %v, want %v %v", c.val, d, set, err, c.want, c.set)
		}
	}
}

func TestRead(t *testing.T) {
	none := Job{Rank: -1, Size: -1, LocalRank: -1, LocalSize: -1}
	for _, c := range []struct {
		name    string
		env     map[string]string
		want    Job
		wantErr string // the variable the error names
	}{
		{name: "none", env: map[string]string{}, want: none},
		{name: "hydra", env: map[string]string{"PMI_RANK": "2", "PMI_SIZE": "4", "MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "2", "GORUN_SEEDS": "h:1"},
			want: Job{Source: LauncherHydra, Rank: 2, Size: 4, LocalRank: 0, LocalSize: 2, Seeds: []string{"h:1"}}},
		{name: "hydra inside a Slurm allocation", env: map[string]string{"PMI_RANK": "1", "PMI_SIZE": "2", "SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_JOB_ID": "7"},
			want: Job{Source: LauncherHydra, Rank: 1, Size: 2, LocalRank: -1, LocalSize: -1}},
		{name: "openmpi", env: map[string]string{"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"},
			want: Job{Source: LauncherOpenMPI, Rank: 1, Size: 2, LocalRank: -1, LocalSize: -1}},
		{name: "slurm", env: map[string]string{"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_JOB_ID": "9", "SLURM_JOB_NODELIST": "n[1-2]-ib"},
			want: Job{Source: LauncherSlurm, Rank: 3, Size: 4, LocalRank: -1, LocalSize: -1, JobID: "9", NodeList: "n[1-2]-ib", Seeds: []string{"n1-ib:20009"}}},
		{name: "torchrun", env: map[string]string{"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "m", "MASTER_PORT": "29500"},
			want: Job{Source: LauncherTorchrun, Rank: 1, Size: 2, LocalRank: -1, LocalSize: -1, Seeds: []string{"m:29501"}}},
		{name: "gorun rank without size", env: map[string]string{"GORUN_RANK": "1"}, wantErr: Size},
		{name: "hydra size without rank", env: map[string]string{"PMI_SIZE": "2"}, wantErr: "PMI_RANK"},
		{name: "hydra rank out of range", env: map[string]string{"PMI_SIZE": "2", "PMI_RANK": "2"}, wantErr: "PMI_RANK"},
		{name: "bad seeds", env: map[string]string{"GORUN_SIZE": "1", "GORUN_RANK": "0", "GORUN_SEEDS": "a:1,,b:2"}, wantErr: Seeds},
	} {
		got, err := Read(mapEnv(c.env))
		if c.wantErr != "" {
			var e *Error
			if !errors.As(err, &e) || e.Var != c.wantErr {
				t.Errorf("%s: err %v, want an *Error naming %s", c.name, err, c.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %+v %v, want %+v", c.name, got, err, c.want)
		}
	}
}

func TestLaunched(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want bool
	}{
		{map[string]string{}, false},
		{map[string]string{"RANK": "3"}, false},         // a common name outside torchrun
		{map[string]string{"SLURM_PROCID": "0"}, false}, // no task count: not an srun task
		{map[string]string{"GORUN_RANK": "0"}, true},
		{map[string]string{"PMI_RANK": "0", "PMI_SIZE": "1"}, true},
		{map[string]string{"OMPI_COMM_WORLD_SIZE": "2"}, true},
		{map[string]string{"SLURM_NTASKS": "2", "SLURM_PROCID": "1"}, true},
		{map[string]string{"WORLD_SIZE": "2"}, true},
	} {
		if got := Launched(mapEnv(c.env)); got != c.want {
			t.Errorf("Launched(%v) = %v, want %v", c.env, got, c.want)
		}
	}
}

// SeedInUse says, per launcher, how to give the seed another port, and
// wraps the bind's error.
func TestSeedInUse(t *testing.T) {
	bind := errors.New("bind: address already in use")
	for source, want := range map[string]string{
		LauncherGorun:    "gorun --gossip-port PORT",
		LauncherOpenMPI:  "mpirun -x GORUN_SEEDS=HOST:PORT",
		LauncherHydra:    "mpiexec -genv GORUN_SEEDS",
		LauncherSlurm:    "derived from SLURM_JOB_ID",
		LauncherTorchrun: "MASTER_PORT+1",
		"":               "set GORUN_SEEDS=HOST:PORT",
	} {
		err := Job{Source: source, Rank: 0}.SeedInUse("h:7946", bind)
		if !errors.Is(err, bind) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "gossip seed h:7946") {
			t.Errorf("source %q: %v; want it to wrap the bind's error, name the seed and say %q", source, err, want)
		}
	}
}
