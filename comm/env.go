package comm

// Environment variables. Every variable gorun reads is parsed in this file.
//
// Job variables (set by the launcher; comm.Init reads them):
//
//	GORUN_RANK        this process's rank, 0 ≤ rank < GORUN_SIZE (required with GORUN_SIZE)
//	GORUN_SIZE        number of ranks in the job
//	GORUN_LOCAL_RANK  rank among the job's processes on this host (default: derived at Init)
//	GORUN_LOCAL_SIZE  number of the job's processes on this host (default: derived at Init)
//	GORUN_SEEDS       comma-separated host:port gossip addresses to join
//	GORUN_JOB_ID      job identifier (distinguishes concurrent jobs)
//	GORUN_JOB_TOKEN   secret shared by the job's ranks; authenticates connections
//
// When GORUN_SIZE is unset the job is taken, in this order, from
//
//	Open MPI  OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE,
//	          OMPI_COMM_WORLD_LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_SIZE
//	Slurm     SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NODELIST
//	          (SLURM_JOB_ID becomes the job id)
//	torchrun  RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
//	          MASTER_ADDR, MASTER_PORT (MASTER_ADDR:MASTER_PORT becomes the
//	          seed unless GORUN_SEEDS is set; TORCHELASTIC_RUN_ID the job id)
//
// GORUN_SEEDS, GORUN_JOB_ID and GORUN_JOB_TOKEN apply under every launcher.
//
// Tunables (read by Init and NewLocal; options given in code win):
//
//	GORUN_TRANSPORT      auto (default) | verbs | tcp | shm | mem: the provider
//	                     for every peer; auto picks shm on the same host, verbs
//	                     when both ranks have a device, tcp otherwise (mem in
//	                     NewLocal)
//	GORUN_ALGO           per-collective algorithm, e.g. "allreduce:ring,broadcast:tree";
//	                     a bare name ("ring") applies to every collective that has it
//	GORUN_TIMEOUT        per-operation timeout: a Go duration ("90s") or seconds ("90");
//	                     default 5m; 0 disables
//	GORUN_SOCKET_IFNAME  network interface whose address tcp advertises (default: the
//	                     first up, non-loopback interface)
//	GORUN_DEBUG          warn (default) | info | trace: log verbosity (standard log package)
//	GORUN_CHECKSUM       1: tcp verifies a CRC32C of every frame (rdma.Config.Checksum);
//	                     every rank must agree, or connecting fails clearly
//	GORUN_SPIN           how long a collective with nothing to do polls before it
//	                     sleeps: a duration ("200us", "0" sleeps at once), optionally
//	                     ",yield" or ",noyield" (give the CPU to other processes
//	                     between polls); default 1ms, yielding when this host's ranks
//	                     outnumber its CPUs (WithSpin)

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gorun-hpc/gorun/collectives"
)

// jobEnv is the job description found in the environment.
type jobEnv struct {
	Source    string // "gorun", "openmpi", "slurm", "torchrun"; "" if none
	Rank      int
	Size      int
	LocalRank int // -1 if unknown
	LocalSize int // -1 if unknown
	Seeds     []string
	JobID     string
	Token     string
	NodeList  string // SLURM_NODELIST, unexpanded
}

// envError names the variable and the bad value.
type envError struct {
	Var, Value, Why string
}

func (e *envError) Error() string {
	return fmt.Sprintf("gorun: environment %s=%q: %s", e.Var, e.Value, e.Why)
}

// readJobEnv parses the job variables. It returns Source "" and no error
// when no launcher variables are set.
func readJobEnv(getenv func(string) string) (jobEnv, error) {
	j := jobEnv{Rank: -1, Size: -1, LocalRank: -1, LocalSize: -1}
	type vars struct{ source, rank, size, lrank, lsize string }
	sets := []vars{
		{"gorun", "GORUN_RANK", "GORUN_SIZE", "GORUN_LOCAL_RANK", "GORUN_LOCAL_SIZE"},
		{"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
		{"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", ""},
		{"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
	}
	var err error
	for _, v := range sets {
		if getenv(v.size) == "" {
			continue
		}
		j.Source = v.source
		if j.Size, err = envInt(getenv, v.size, 1); err != nil {
			return j, err
		}
		if getenv(v.rank) == "" {
			return j, &envError{v.rank, "", "unset while " + v.size + " is set"}
		}
		if j.Rank, err = envInt(getenv, v.rank, 0); err != nil {
			return j, err
		}
		if j.Rank >= j.Size {
			return j, &envError{v.rank, getenv(v.rank), fmt.Sprintf("not below %s=%d", v.size, j.Size)}
		}
		if v.lsize != "" && getenv(v.lsize) != "" {
			if j.LocalSize, err = envInt(getenv, v.lsize, 1); err != nil {
				return j, err
			}
		}
		if getenv(v.lrank) != "" {
			if j.LocalRank, err = envInt(getenv, v.lrank, 0); err != nil {
				return j, err
			}
			if j.LocalSize > 0 && j.LocalRank >= j.LocalSize {
				return j, &envError{v.lrank, getenv(v.lrank), fmt.Sprintf("not below %s=%d", v.lsize, j.LocalSize)}
			}
		}
		break
	}
	switch j.Source {
	case "slurm":
		j.JobID = getenv("SLURM_JOB_ID")
		j.NodeList = getenv("SLURM_NODELIST")
	case "torchrun":
		j.JobID = getenv("TORCHELASTIC_RUN_ID")
		addr, port := getenv("MASTER_ADDR"), getenv("MASTER_PORT")
		if addr != "" || port != "" {
			if addr == "" || port == "" {
				return j, &envError{"MASTER_ADDR", addr, "MASTER_ADDR and MASTER_PORT must be set together"}
			}
			if _, err := envInt(getenv, "MASTER_PORT", 1); err != nil {
				return j, err
			}
			j.Seeds = []string{joinHostPort(addr, port)}
		}
	}
	if s := getenv("GORUN_SEEDS"); s != "" {
		j.Seeds = nil
		for _, p := range strings.Split(s, ",") {
			p = strings.TrimSpace(p)
			if p == "" {
				return j, &envError{"GORUN_SEEDS", s, "empty address in list"}
			}
			if i := strings.LastIndexByte(p, ':'); i <= 0 || i == len(p)-1 {
				return j, &envError{"GORUN_SEEDS", s, fmt.Sprintf("%q is not host:port", p)}
			}
			j.Seeds = append(j.Seeds, p)
		}
	}
	if s := getenv("GORUN_JOB_ID"); s != "" {
		j.JobID = s
	}
	j.Token = getenv("GORUN_JOB_TOKEN")
	return j, nil
}

func joinHostPort(host, port string) string {
	if strings.Contains(host, ":") && !strings.HasPrefix(host, "[") {
		return "[" + host + "]:" + port
	}
	return host + ":" + port
}

func envInt(getenv func(string) string, name string, lo int) (int, error) {
	s := strings.TrimSpace(getenv(name))
	v, err := strconv.Atoi(s)
	if err != nil {
		return 0, &envError{name, getenv(name), "not an integer"}
	}
	if v < lo {
		return 0, &envError{name, getenv(name), fmt.Sprintf("must be at least %d", lo)}
	}
	return v, nil
}

// tunables are the GORUN_* settings that options can also set.
type tunables struct {
	Transport    string
	Algos        map[collectives.Collective]collectives.Algo
	Timeout      time.Duration
	HasTimeout   bool
	SocketIfname string
	Debug        int
	Checksum     bool
	Spin         time.Duration
	HasSpin      bool
	Yield        int // 0 auto, 1 yield, -1 don't
}

// Debug levels.
const (
	debugWarn = iota
	debugInfo
	debugTrace
)

func readTunables(getenv func(string) string) (tunables, error) {
	var t tunables
	if s := getenv("GORUN_TRANSPORT"); s != "" {
		s = strings.ToLower(strings.TrimSpace(s))
		switch s {
		case "auto", "verbs", "tcp", "shm", "mem":
		default:
			return t, &envError{"GORUN_TRANSPORT", s, "want auto, verbs, tcp, shm or mem"}
		}
		t.Transport = s
	}
	if s := getenv("GORUN_ALGO"); s != "" {
		m, err := parseAlgoSpec(s)
		if err != nil {
			return t, &envError{"GORUN_ALGO", s, err.Error()}
		}
		t.Algos = m
	}
	if s := strings.TrimSpace(getenv("GORUN_TIMEOUT")); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			n, err2 := strconv.ParseFloat(s, 64)
			if err2 != nil || n < 0 {
				return t, &envError{"GORUN_TIMEOUT", s, "want a duration (90s) or seconds (90)"}
			}
			d = time.Duration(n * float64(time.Second))
		}
		if d < 0 {
			return t, &envError{"GORUN_TIMEOUT", s, "negative"}
		}
		t.Timeout, t.HasTimeout = d, true
	}
	t.SocketIfname = strings.TrimSpace(getenv("GORUN_SOCKET_IFNAME"))
	switch s := strings.ToLower(strings.TrimSpace(getenv("GORUN_CHECKSUM"))); s {
	case "", "0", "false", "off":
	case "1", "true", "on":
		t.Checksum = true
	default:
		return t, &envError{"GORUN_CHECKSUM", s, "want 1 or 0"}
	}
	if s := strings.ToLower(strings.TrimSpace(getenv("GORUN_SPIN"))); s != "" {
		d, y, err := parseSpin(s)
		if err != nil {
			return t, &envError{"GORUN_SPIN", s, err.Error()}
		}
		t.Spin, t.HasSpin, t.Yield = d, true, y
	}
	switch s := strings.ToLower(strings.TrimSpace(getenv("GORUN_DEBUG"))); s {
	case "", "warn":
		t.Debug = debugWarn
	case "info":
		t.Debug = debugInfo
	case "trace":
		t.Debug = debugTrace
	default:
		return t, &envError{"GORUN_DEBUG", s, "want warn, info or trace"}
	}
	return t, nil
}

// parseAlgoSpec parses "allreduce:ring,broadcast:tree" or a bare "ring".
func parseAlgoSpec(s string) (map[collectives.Collective]collectives.Algo, error) {
	m := map[collectives.Collective]collectives.Algo{}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, algo, ok := strings.Cut(item, ":")
		if !ok {
			a, err := collectives.ParseAlgo(item)
			if err != nil {
				return nil, err
			}
			found := false
			for c := collectives.AllReduce; c <= collectives.AllToAll; c++ {
				if collectives.Supports(c, a) || a == collectives.Auto {
					m[c] = a
					found = true
				}
			}
			if !found {
				return nil, fmt.Errorf("no collective has algorithm %q", item)
			}
			continue
		}
		c, err := collectives.ParseCollective(name)
		if err != nil {
			return nil, err
		}
		if strings.TrimSpace(algo) == "" {
			return nil, fmt.Errorf("no algorithm after %q", name+":")
		}
		a, err := collectives.ParseAlgo(algo)
		if err != nil {
			return nil, err
		}
		if a != collectives.Auto && !collectives.Supports(c, a) {
			return nil, fmt.Errorf("%s has no algorithm %q (have %v)", c, algo, collectives.Algos(c))
		}
		m[c] = a
	}
	return m, nil
}

// osGetenv is os.Getenv; tests replace the environment with a map.
var osGetenv = os.Getenv

// parseSpin reads GORUN_SPIN: "DURATION[,yield|,noyield]" ("0" is a
// duration here).
func parseSpin(s string) (time.Duration, int, error) {
	ds, mode, _ := strings.Cut(s, ",")
	ds = strings.TrimSpace(ds)
	d, err := time.ParseDuration(ds)
	if err != nil && ds == "0" {
		d, err = 0, nil
	}
	if err != nil || d < 0 {
		return 0, 0, fmt.Errorf("want a duration such as 200us, optionally followed by ,yield or ,noyield")
	}
	switch strings.TrimSpace(mode) {
	case "":
		return d, 0, nil
	case "yield":
		return d, 1, nil
	case "noyield":
		return d, -1, nil
	}
	return 0, 0, fmt.Errorf("after the duration, want yield or noyield")
}

// Observability (observe.go): off unless set.
//
//	GORUN_TIMELINE      FILE: each rank records its operations to FILE.RANK
//	                    (gorun --timeline merges them); an unwritable path fails Init
//	GORUN_METRICS_ADDR  host:port: each rank serves Prometheus text at /metrics
//	                    (port + local rank when several ranks share a host)
type obsEnv struct {
	Timeline    string
	MetricsAddr string
}

func readObsEnv(getenv func(string) string) obsEnv {
	return obsEnv{Timeline: strings.TrimSpace(getenv("GORUN_TIMELINE")), MetricsAddr: strings.TrimSpace(getenv("GORUN_METRICS_ADDR"))}
}
