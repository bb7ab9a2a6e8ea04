package comm

import (
	"context"
	"fmt"
	"time"

	"github.com/gorun-hpc/gorun/collectives"
	"github.com/gorun-hpc/gorun/internal/engine"
	"github.com/gorun-hpc/gorun/internal/jobenv"
)

// Option configures Init and NewLocal. A communicator made from another
// (Split, Dup, CreateGroup, Shrink, Grow) keeps its parent's configuration.
type Option func(*config) error

// config is the resolved configuration of a communicator.
type config struct {
	// transport is auto, verbs, tcp, shm or mem.
	transport string
	// timeout bounds every operation; 0 disables. Default 5 minutes: long
	// enough for a first-step compile skew, short enough to unstick a job.
	timeout time.Duration
	// algos forces an algorithm per collective (Auto: the selection table);
	// sized by the number of kinds, so indexing costs no allocation or lookup.
	algos [collectives.NumCollectives]collectives.Algo
	// deterministic pins every reduction to a fixed order (see Deterministic).
	deterministic bool
	// token is the job secret passed to rdma.Config.Token.
	token []byte
	// socketIfname picks the address tcp advertises.
	socketIfname string
	debug        int
	// slots and slotBytes size each peer's receive staging area. Default
	// 8 × 128 KiB (8 × 1 MiB when the job runs on tcp: stagingFor), shrunk
	// for large worlds to bound memory to ~32 MiB. slotBytes 0: the default.
	slots, slotBytes int
	// regCache bounds the registration cache (entries per device). Default 64.
	regCache int
	// local: the communicator lives in one process (NewLocal); auto means mem.
	local bool
	// checksum: providers that cross a network verify a CRC32C of every
	// frame (rdma.Config.Checksum). Off by default: it costs CPU per byte.
	checksum bool
	// quorum: Shrink and Grow go on only with a majority of the last
	// whole world (quorum.go; GORUN_QUORUM, WithQuorum).
	quorum bool
	// tuning: the cost model's constants for the selection table
	// (GORUN_COST_FILE, WithTuning); nil: cost.go's.
	tuning *collectives.Tuning
	// localRanks is how many of the job's ranks share this host, when
	// known before connecting (launcher variables, NewLocal); 0 unknown.
	localRanks int
	// cpuSharers is how many of the communicator's ranks run on this
	// rank's CPUs, all cpus of them (endpoint.cpus), whichever host they
	// name: namespace hosts of one machine share its CPUs; cpuSharersAway
	// counts those on other hosts. Known after the rendezvous; 0 unknown.
	cpuSharers, cpuSharersAway, cpus int
	// spin, if set, overrides how long a waiting collective polls
	// (GORUN_SPIN, WithSpin); yield: 0 auto, 1 yield, -1 don't.
	spin    time.Duration
	hasSpin bool
	yield   int
	// probe, if set, is gossip's probe period (GORUN_PROBE_INTERVAL,
	// WithProbeInterval); 0: the default, relaxed on an oversubscribed
	// host (relaxProbes).
	probe time.Duration
	// timeline: FILE, recorded to FILE.RANK (GORUN_TIMELINE, WithTimeline).
	timeline string
	// metricsAddr: serve Prometheus text there (GORUN_METRICS_ADDR);
	// localRank offsets its port (-1 unknown: the rank).
	metricsAddr string
	localRank   int
	// obs is this process's recorder, shared by the communicators made
	// from the first (Split, Shrink); nil when nothing observes.
	obs *observer
	// simHost, when set, replaces this rank's host identity, and simHosts
	// (NewLocal) gives each rank a simulated host: tests make in-process
	// worlds that span hosts.
	simHost  *[8]byte
	simHosts []int
}

// newConfig applies the defaults, then the GORUN_* tunables, then opts.
func newConfig(opts ...Option) (*config, error) {
	c := &config{transport: "auto", timeout: 5 * time.Minute, slots: 8, regCache: 64}
	t, err := readTunables(osGetenv)
	if err != nil {
		return nil, err
	}
	if t.Transport != "" {
		c.transport = t.Transport
	}
	if t.HasTimeout {
		c.timeout = t.Timeout
	}
	for k, a := range t.Algos {
		c.algos[k] = a
	}
	c.socketIfname = t.SocketIfname
	c.debug = t.Debug
	c.checksum = t.Checksum
	c.quorum = t.Quorum
	c.tuning = t.Tuning
	c.spin, c.hasSpin, c.yield = t.Spin, t.HasSpin, t.Yield
	c.probe = t.Probe
	oe := readObsEnv(osGetenv)
	c.timeline, c.metricsAddr, c.localRank = oe.Timeline, oe.MetricsAddr, -1
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(c); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// bound returns ctx bounded by the communicator's timeout (WithTimeout,
// GORUN_TIMEOUT), or ctx itself where there is none; cancel it when done.
func (c *config) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if c == nil || c.timeout <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, c.timeout)
}

// WithChecksum makes providers that cross a network (tcp) verify a CRC32C
// of every frame, so a corrupted frame fails the connection instead of
// landing as data (GORUN_CHECKSUM=1). Every rank must use the same setting.
func WithChecksum() Option {
	return func(c *config) error { c.checksum = true; return nil }
}

// WithQuorum makes Shrink and Grow fail with ErrNoQuorum on the ranks of
// a world that keeps no majority of the ranks of the last whole world, so
// that of a job cut in two only one side goes on (GORUN_QUORUM=majority;
// quorum.go). Every rank must use the same setting: Init fails otherwise.
func WithQuorum() Option {
	return func(c *config) error { c.quorum = true; return nil }
}

// WithTransport picks the provider for every peer: "auto", "verbs", "tcp",
// "shm" or "mem" (mem only within one process).
func WithTransport(name string) Option {
	return func(c *config) error {
		t, err := parseTransport(name)
		if err != nil {
			return fmt.Errorf("gorun: unknown transport %q: %w", name, err)
		}
		c.transport = t
		return nil
	}
}

// WithTimeout bounds every operation (0: no bound besides the context).
// The default is GORUN_TIMEOUT, or else 5 minutes.
func WithTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("gorun: negative timeout %v", d)
		}
		c.timeout = d
		return nil
	}
}

// WithAlgorithm forces algorithms, as GORUN_ALGO does:
// "allreduce:ring,broadcast:tree", or one name for every collective.
func WithAlgorithm(spec string) Option {
	return func(c *config) error {
		m, err := parseAlgoSpec(spec)
		if err != nil {
			return fmt.Errorf("gorun: algorithm %q: %w", spec, err)
		}
		for k, a := range m {
			c.algos[k] = a
		}
		return nil
	}
}

// Deterministic makes float reductions bitwise reproducible run to run for
// a given world size and count: the algorithm no longer depends on tuning
// (ring for allreduce, the binomial tree for reduce), and every schedule
// reduces in a fixed order, so all ranks get identical bits.
func Deterministic() Option {
	return func(c *config) error { c.deterministic = true; return nil }
}

// WithToken sets the job secret that authenticates connections.
func WithToken(token []byte) Option {
	return func(c *config) error { c.token = append([]byte(nil), token...); return nil }
}

// WithStaging sizes each peer's receive staging area: slots messages of at
// most slotBytes (rounded up to 4 KiB) in flight per peer. It is an upper
// bound, as the defaults are: where a rank's links would take more than
// its staging budget (32 MiB over the links Init connects; in a world of
// n ranks in one process, 256 MiB/n² per rank, at least 256 KiB, over n-1
// peers, and at least 128 KiB a link up to 204 ranks), the slot size
// halves, not below 4 KiB, and then slots go, not below 2 (8 in a world
// in one process up to 1,260 ranks: localMinSlots), until they fit.
func WithStaging(slots, slotBytes int) Option {
	return func(c *config) error {
		if slots < 1 || slots > 1024 || slotBytes < 1 {
			return fmt.Errorf("gorun: bad staging %d×%d", slots, slotBytes)
		}
		c.slots, c.slotBytes = slots, (slotBytes+4095)&^4095
		return nil
	}
}

// WithProbeInterval sets how often gossip probes each rank's liveness
// (GORUN_PROBE_INTERVAL), from 50ms to 1m; a probe times out after 3/5 of
// d. A rank on another host that stops answering is reported dead about
// 4·d later (a probe, then 3·d of suspicion), 13·d at most while no second
// rank confirms the suspicion; beyond 10 ranks the suspicion lasts log10
// of the size times longer. The default is 250ms, times the ranks per CPU
// / 2 (at most 8×) where the job's ranks oversubscribe their host. A
// longer period spares ranks starved of CPU by work the launcher cannot
// count (other jobs, namespace or container hosts of one machine) a false
// death, at the cost of a later report of a frozen or cut-off rank; a
// crashed rank is still reported at once, by its closed connections. Set
// the same on every rank.
func WithProbeInterval(d time.Duration) Option {
	return func(c *config) error {
		if d < jobenv.MinProbe || d > jobenv.MaxProbe {
			return fmt.Errorf("gorun: probe interval %v: want 50ms to 1m", d)
		}
		c.probe = d
		return nil
	}
}

// WithSpin sets how long a collective that has nothing to do polls for its
// peers' messages before it sleeps (GORUN_SPIN). Polling costs a CPU and
// answers in well under a microsecond; a sleep costs a wake-up (13–20 µs
// across CPUs where measured). The default is 1ms, giving the CPU to other
// processes between polls when the ranks on this rank's CPUs outnumber
// them.
func WithSpin(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("gorun: negative spin %v", d)
		}
		c.spin, c.hasSpin = d, true
		return nil
	}
}

// waitPolicy is the engine's wait policy for this configuration.
func (c *config) waitPolicy() engine.WaitPolicy {
	p := engine.DefaultWait(c.localRanks)
	if c.cpus > 0 && c.cpuSharers > c.cpus {
		// More ranks on these CPUs than CPUs, though the launcher counted
		// them on different hosts (namespaces or containers of one
		// kernel): yield as where one host's ranks outnumber its CPUs.
		// 8 B allreduce on the namespace cluster (2 hosts x 2 ranks, 2
		// Gbit/s links, quiet, 2026-11-27 16:48, 3 rounds, us): polling
		// and yielding 35-44 (Open MPI, which yields too: 37), sleeping
		// at once (GORUN_SPIN=0) 198-206. Polling without yielding, as
		// before, took 400-1,200 (with another job running: no quiet
		// figure). Beside another job's load a yield hands the CPU to
		// it for a whole slice: there polling took 250-3,500 and
		// sleeping 130-330 (Open MPI 131).
		p.Yield = true
		if c.cpuSharersAway > 0 {
			// Some on other hosts: a large message's wait over the
			// network is milliseconds, and a millisecond's polling
			// per wait takes the CPUs from the network stack. 4
			// hosts x 1 rank, 2 rounds, 17:05 (load 3.5-4.3):
			// polling for 1 ms, 100 us, not at all: 8 B 172-176,
			// 155-183, 150-167 us; 1 MiB 13.4-15.0, 6.0-6.1,
			// 6.5-6.5 ms; 16 MiB 167-173, 105-106, 104 ms. 2 x 2:
			// 8 B 33-37, 33-39, 58-67 us; 1 MiB 4.3-4.6, 3.9-4.0,
			// 4.2-4.4 ms; 16 MiB level.
			p.Spin = 100 * time.Microsecond
		}
	}
	if c.local {
		// One process: a wake-up is a goroutine switch, and the ranks'
		// goroutines share GOMAXPROCS threads; long polls only slow them,
		// and a poll that finds nothing hands the thread to the others
		// rather than the CPU to other processes.
		p.Spin = 20 * time.Microsecond
		p.InProcess, p.Yield = true, false
	}
	if c.hasSpin {
		p.Spin = c.spin
	}
	switch c.yield {
	case 1:
		p.Yield = true
	case -1:
		p.Yield = false
	}
	return p
}
