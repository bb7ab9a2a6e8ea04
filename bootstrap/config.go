package bootstrap

import (
	"crypto/hkdf"
	"crypto/sha256"
	"fmt"
	"io"
	"log"
	"math"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/gorun-hpc/gorun/internal/jobenv"
)

// Config configures one rank's bootstrap node. JobID and Size are required;
// zero timing fields take the DefaultLANConfig value.
type Config struct {
	JobID string // ≤ 64 bytes; nodes of another job are refused
	Token []byte // job secret; gossip is encrypted with a key derived from it (empty: plaintext)
	Rank  int    // this rank, or -1 to be assigned one from the agreed view
	Size  int    // number of ranks in the world
	// MaxSize is the most ranks Grow admits (gorun --max-np); 0 means Size.
	// A rank launched to grow the job has Size ≤ Rank < MaxSize.
	MaxSize int
	// Restarted says that this node restarts a rank of a running job (gorun
	// --max-restarts sets GORUN_RESTART): it joins the job, and if none of
	// the job's other ranks is left to admit it (they finished or died
	// before it was seen), its Form fails with ErrJobGone once it has
	// found itself alone for 10 s, not at its context's end. Without it, a
	// joiner that finds itself alone waits: the others may be calling Init
	// again (a finalize and init in the same job), which looks the same
	// for as long as their new nodes take to come.
	Restarted bool
	// Finalized is the digest (World.Digest) of the world that this
	// process's previous node of the job formed and then closed (a
	// finalize and init again in the same job: comm.Init after Close);
	// zero if none. A node of that world still open (its rank is slow to
	// finalize) does not tell this node that the job runs (grow.go): the
	// world it runs is one this rank left, which will never admit it, and
	// a rank lost while the new world forms ends the formation, as in the
	// job's first (formloss.go).
	Finalized [digestLen]byte

	BindAddr      string   // gossip address (UDP and TCP); default "0.0.0.0"
	BindPort      int      // 0 picks a free port
	AdvertiseAddr string   // address peers use, if not BindAddr
	AdvertisePort int      // port peers use, if not the bound one
	Seeds         []string // host:port of seed nodes; this node's own address is skipped
	Host          string   // locality identity (≤ 64 bytes); default HostIdentity()
	Logger        *log.Logger

	// Timeout bounds world formation in Join in addition to the context;
	// negative means the context alone.
	Timeout time.Duration

	// GossipInterval and GossipNodes: every GossipInterval a node sends
	// queued updates (joins, meta changes, deaths) to GossipNodes random
	// peers. Meta changes are how the world view is agreed, so this sets the
	// formation time: a few rounds of log(N) gossip.
	GossipInterval time.Duration
	GossipNodes    int

	// PushPullInterval is the period of full-state TCP syncs with one random
	// peer; it repairs lost UDP gossip.
	PushPullInterval time.Duration

	// ProbeInterval, ProbeTimeout and SuspicionMult set failure detection:
	// a node probes one peer per interval; a peer that does not answer
	// (directly or through IndirectChecks others) within ProbeTimeout is
	// suspected, and declared dead SuspicionMult·max(1,log10 N)·ProbeInterval
	// later unless it refutes.
	ProbeInterval  time.Duration
	ProbeTimeout   time.Duration
	SuspicionMult  int
	IndirectChecks int

	// DisableTCPPings turns off memberlist's TCP fallback probe of a peer
	// that missed its UDP probes. The fallback catches UDP-only loss; it
	// costs a connection per failed probe, which hurts when the failed
	// probes come from an overloaded host.
	DisableTCPPings bool

	TCPTimeout   time.Duration // connect + push/pull deadline
	RetryJoin    time.Duration // first delay between attempts to join the seeds (doubles, max 1s)
	LeaveTimeout time.Duration // how long Close waits for the leave message to go out

	// Running, if set, says whether a member's process is known to be
	// running on this host: the kernel shows it runnable or sleeping, not
	// stopped, a zombie or gone. Gossip does not declare such a member
	// dead here: on a loaded host a process starved of CPU misses its
	// probes, and the kernel is the better witness. It is reported once
	// the evidence says it is gone (a refused connection, or Witnessed),
	// and gossip takes it back when it refutes the suspicion.
	Running func(Member) bool

	// Ended, if set, says whether a member's process is known to have
	// ended: on this host, the process that published it is gone or a
	// zombie. A probe of a suspect member (evidence.go) that finds its
	// gossip port open then believes this instead: a new process may
	// have taken the port, as a restarted seed rank takes the job's seed
	// address. Such a member is reported as a witness's (errStopped), and
	// the others believe it.
	Ended func(Member) bool

	// Started, if set, is called by Join with the node once it is up,
	// before Form waits for the world, on Join's goroutine: comm hands it
	// the launcher's word of ranks that ended before they joined
	// (Node.Exited).
	Started func(*Node)

	// CountTraffic makes Node.Traffic count the packets, streams and bytes
	// this node's gossip sends and receives (for scale measurements; it
	// adds a channel hop to every received packet).
	CountTraffic bool

	// Network, if set, carries this node's gossip in this process instead
	// of over UDP and TCP (memnet.go): for tests and measurements of many
	// nodes in one process. BindAddr is then ignored; BindPort 0 takes a
	// free port of the network. Traffic is counted.
	Network *MemNetwork
}

// DefaultLANConfig is tuned for one job on a LAN or a single host: a rank
// that stops answering (frozen, or its host cut off) with no witness on
// its host (comm/witness.go) is reported about 1.25 s later (4 ranks, one
// per namespace host: median 1.24 s, max 1.75 s, n = 20, RELIABILITY.md),
// and 64 ranks in one process form their world in 0.2-2 s on a loaded
// 2-core machine (BenchmarkBootstrap). memberlist's own LAN preset (1 s
// probes, 500 ms probe timeout, suspicion 4·log10(N) s, 200 ms gossip) is
// built for long-lived server clusters and reports a crash after 5-25 s;
// a stalled collective cannot wait that long.
//
// How the time adds up: a survivor probes the frozen rank within about
// ProbeInterval/3 (each of 3 survivors probes one of its 3 peers per
// interval); the probe fails at the end of its interval (direct ping,
// indirect pings, TCP fallback); a second survivor's failed probe
// confirms the suspicion, which then ends SuspicionMult·ProbeInterval
// after it began; the last call (lastcall.go) adds ProbeTimeout. Before
// 2026-11-25 the interval was 500 ms: 2.3 s (n = 5).
//
// A live rank is declared dead only if it answers none of two or more
// peers' probes, nor refutes their suspicion, for about a second, and then
// misses the last call's two pings. Ranks run on busy hosts (data
// loaders, kernels), so shorter settings were tried and dropped: 200 ms
// probes with a 100 ms timeout and at most 2× unconfirmed suspicion
// declared live ranks dead at load 19-25 in the test suite, before a
// member on the same host whose process runs was exempt (Config.Running);
// without the last call, 250 ms probes declared a live rank dead in 3 of
// 5 load soaks with one rank per namespace host beside a CPU hog, and
// 300 ms probes in 1 of 6 (the observer's own gossip ran a second late).
// With the last call: no false death in the soaks of RELIABILITY.md. Lifeguard's awareness (memberlist's
// default) also stretches the probes of a node that notices it is slow.
func DefaultLANConfig() Config {
	return Config{
		Rank:             -1,
		BindAddr:         "0.0.0.0",
		Timeout:          60 * time.Second,       // GORUN_TIMEOUT's default
		GossipInterval:   20 * time.Millisecond,  // joins spread in a few 20 ms rounds; idle rounds send nothing
		GossipNodes:      4,                      // fan-out of each round
		PushPullInterval: 2 * time.Second,        // repairs lost UDP; memberlist scales it up beyond 32 nodes
		ProbeInterval:    250 * time.Millisecond, // each node probes one peer 4 times a second; a probe fails when nothing answers within the interval
		ProbeTimeout:     150 * time.Millisecond, // the direct UDP ping's share of the interval (the indirect pings and the TCP fallback get the rest), and a last call's wait
		SuspicionMult:    3,                      // dead after 3·max(1,log10 N)·250 ms = 750 ms (N ≤ 10) to 1.35 s (N = 64) once confirmed, at most four times that unconfirmed
		IndirectChecks:   3,                      // ask 3 peers before suspecting (avoids false positives)
		TCPTimeout:       2 * time.Second,        // push/pull and join connections
		RetryJoin:        50 * time.Millisecond,  // seeds start at the same time as the other ranks
		LeaveTimeout:     200 * time.Millisecond, // a leave message goes out in one gossip round (20 ms)
	}
}

// DefaultLocalConfig is DefaultLANConfig bound to the loopback interface,
// for tests and single-host jobs.
func DefaultLocalConfig() Config {
	c := DefaultLANConfig()
	c.BindAddr = "127.0.0.1"
	return c
}

// withDefaults fills zero fields from DefaultLANConfig and checks the rest.
func (c Config) withDefaults() (Config, error) {
	d := DefaultLANConfig()
	set := func(p *time.Duration, v time.Duration) {
		if *p == 0 {
			*p = v
		}
	}
	setInt := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	if c.BindAddr == "" {
		c.BindAddr = d.BindAddr
	}
	if c.Host == "" {
		c.Host = HostIdentity()
	}
	set(&c.Timeout, d.Timeout)
	set(&c.GossipInterval, d.GossipInterval)
	setInt(&c.GossipNodes, d.GossipNodes)
	set(&c.PushPullInterval, d.PushPullInterval)
	set(&c.ProbeInterval, d.ProbeInterval)
	set(&c.ProbeTimeout, d.ProbeTimeout)
	setInt(&c.SuspicionMult, d.SuspicionMult)
	setInt(&c.IndirectChecks, d.IndirectChecks)
	set(&c.TCPTimeout, d.TCPTimeout)
	set(&c.RetryJoin, d.RetryJoin)
	set(&c.LeaveTimeout, d.LeaveTimeout)
	switch {
	case c.JobID == "":
		return c, fmt.Errorf("%w: empty job id", ErrInvalidConfig)
	case len(c.JobID) > MaxJobID:
		return c, fmt.Errorf("%w: job id longer than %d bytes", ErrInvalidConfig, MaxJobID)
	case len(c.Host) > MaxHost:
		return c, fmt.Errorf("%w: host identity longer than %d bytes", ErrInvalidConfig, MaxHost)
	case c.Size < 1:
		return c, fmt.Errorf("%w: size %d", ErrInvalidConfig, c.Size)
	case c.MaxSize != 0 && c.MaxSize < c.Size:
		return c, fmt.Errorf("%w: max size %d below size %d", ErrInvalidConfig, c.MaxSize, c.Size)
	case c.Rank < -1 || c.Rank >= max(c.Size, c.MaxSize):
		return c, fmt.Errorf("%w: rank %d not in [-1, %d)", ErrInvalidConfig, c.Rank, max(c.Size, c.MaxSize))
	case c.BindPort < 0 || c.BindPort > 65535:
		return c, fmt.Errorf("%w: port %d", ErrInvalidConfig, c.BindPort)
	}
	return c, nil
}

// GossipKey derives the 32-byte AES-256 key memberlist encrypts gossip with
// from the job token: HKDF-SHA-256 with a fixed salt and label. Nodes with
// another token cannot decrypt (or be decrypted) and never join.
func GossipKey(token []byte) []byte {
	// hkdf.Key fails only for lengths over 255·32 bytes.
	key, _ := hkdf.Key(sha256.New, token, []byte("gorun"), "gorun gossip key v1", 32)
	return key
}

// HostIdentity names this machine for locality (jobenv.HostIdentity: the
// hostname plus a hash of the kernel boot id).
func HostIdentity() string { return jobenv.HostIdentity() }

// memberlistConfig maps c onto memberlist's configuration.
func (c Config) memberlistConfig(name string) *memberlist.Config {
	mc := memberlist.DefaultLANConfig()
	mc.Name = name
	mc.BindAddr = c.BindAddr
	mc.BindPort = c.BindPort
	mc.AdvertiseAddr = c.AdvertiseAddr
	mc.AdvertisePort = c.AdvertisePort
	if mc.AdvertisePort == 0 {
		mc.AdvertisePort = c.BindPort // memberlist replaces both when BindPort is 0
	}
	mc.GossipInterval = c.GossipInterval
	mc.GossipNodes = c.GossipNodes
	mc.PushPullInterval = c.PushPullInterval
	mc.ProbeInterval = c.ProbeInterval
	mc.ProbeTimeout = c.ProbeTimeout
	mc.SuspicionMult = c.SuspicionMult
	mc.IndirectChecks = c.IndirectChecks
	mc.TCPTimeout = c.TCPTimeout
	mc.DisableTcpPings = c.DisableTCPPings
	mc.GossipToTheDeadTime = 2 * time.Second // dead ranks do not come back
	mc.RetransmitMult = 4                    // as LAN: an update is sent 4·log(N+1) times
	mc.SuspicionMaxTimeoutMult = 4           // unconfirmed suspicion lasts at most 4× the confirmed one (LAN: 6); 2 with a 200 ms probe gave false deaths under load. With SuspicionMult 3, one confirmation brings it down to the confirmed one
	mc.EnableCompression = false             // metas are small; saves CPU
	mc.DeadNodeReclaimTime = time.Second     // a restarted rank may reuse its address
	mc.QueueCheckInterval = 30 * time.Second
	c.scale(mc)
	if len(c.Token) > 0 {
		mc.SecretKey = GossipKey(c.Token)
	}
	if c.Logger != nil {
		mc.Logger = c.Logger
	} else {
		mc.Logger = log.New(io.Discard, "", 0)
	}
	return mc
}

// Scaling with the job's size. Every memberlist node sends each update
// (a join above all) RetransmitMult·⌈log10(n+1)⌉ times, so a formation of
// n members costs about n²·RetransmitMult·⌈log10(n+1)⌉ message sends in
// all, and on a few shared cores that CPU, not the network, is what a
// thousand-member job waits for. Formation does not need every member to
// hear every join (the coordinator, the seed, learns each at its join, and
// the prepare carries its table down a tree: table.go), so beyond
// thinAbove members the multiplier falls to keep about six sends per
// update per node (four from 1,000), leaving the rest to the push/pull
// anti-entropy. (A Shrink used to wait until the views of the survivors
// held each other again; shrinkTable now keeps every member not known to
// have left, and beyond helloAbove the first world forms by hello,
// before the views fill: hello.go.) The anti-entropy moves n members'
// state per sync, so beyond scaleAbove it runs at least every
// scaledPushPull (memberlist's LAN default is 30 s; it stretches that
// further by log2(n/32)). The TCP deadline of a push/pull
// of n members' state grows with n, and the first joins spread over
// n·joinSpread, since a seed refuses push/pulls beyond 128 pending.
const (
	joinSpread     = time.Millisecond // first join within Size·joinSpread of Start
	scaleAbove     = 64
	thinAbove      = 128                  // 256 members formed 10× faster thinned (README, Scale), but shrank slower
	tcpPerMember   = 4 * time.Millisecond // push/pull deadline per member, beyond Config.TCPTimeout
	scaledPushPull = 10 * time.Second     // the least PushPullInterval beyond scaleAbove
)

// scale adapts mc to a job of c.Size (or MaxSize) members.
func (c Config) scale(mc *memberlist.Config) {
	n := max(c.Size, c.MaxSize)
	if n <= scaleAbove {
		return
	}
	if n > thinAbove {
		mc.RetransmitMult = max(1, 6/retransmitRounds(n))
	}
	mc.PushPullInterval = max(mc.PushPullInterval, scaledPushPull)
	mc.TCPTimeout = max(mc.TCPTimeout, time.Duration(n)*tcpPerMember)
}

// retransmitRounds is memberlist's ⌈log10(n+1)⌉.
func retransmitRounds(n int) int { return int(math.Ceil(math.Log10(float64(n + 1)))) }
