package launcher

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"
)

// Multi-node start without ssh, as torchrun --nnodes does: the same gorun
// command runs on every node with its own --node-rank, and the nodes meet
// at --seed HOST:PORT, which node 0 serves.
//
// Before any rank starts, gorun on each node R > 0 dials HOST:PORT and
// checks in with what it was told (--nnodes, -np, its node rank), signed
// with the job token; gorun on node 0 answers every node once all have
// checked in, or at once with the reason when one disagrees. So a
// mismatched --nnodes or -np, two nodes with the same rank, a different
// token, or a seed that never answers fail in seconds with an error that
// says which, instead of ranks waiting for a world that cannot form. The
// ranks then gossip through node 0's rank 0 at HOST:PORT+1.
//
// The job token comes from GORUN_JOB_TOKEN, which should be a secret the
// nodes share (a Kubernetes Secret); without it, gorun derives one from
// the seed, which keeps jobs apart but is no secret.

// DefaultSeedTimeout bounds how long nodes wait for each other at the seed.
const DefaultSeedTimeout = 30 * time.Second

// checkIn is what a node tells node 0, and node 0's answer.
type checkIn struct {
	NNodes   int    `json:"nnodes"`
	NP       int    `json:"np"`
	NodeRank int    `json:"node_rank"`
	MAC      string `json:"mac,omitempty"`
	Err      string `json:"error,omitempty"`
}

func (c checkIn) sign(token string) string {
	m := hmac.New(sha256.New, []byte(token))
	fmt.Fprintf(m, "gorun check-in v1 %d %d %d %s", c.NNodes, c.NP, c.NodeRank, c.Err)
	return hex.EncodeToString(m.Sum(nil))
}

// nodeJob derives the job's token and id for a multi-node start.
func nodeJob(seed string) (token, jobID string) {
	token = os.Getenv(EnvJobToken)
	if token == "" {
		sum := sha256.Sum256([]byte("gorun node token v1 " + seed))
		token = hex.EncodeToString(sum[:])
	}
	sum := sha256.Sum256([]byte("gorun node job v1 " + token))
	return token, "gorun-" + hex.EncodeToString(sum[:8])
}

// checkNodes validates the multi-node flags.
func checkNodes(cfg Config) (host string, port int, err error) {
	if cfg.NodeRank < 0 || cfg.NodeRank >= cfg.NNodes {
		return "", 0, fmt.Errorf("%w: --node-rank %d: want 0..%d for --nnodes %d", ErrUsage, cfg.NodeRank, cfg.NNodes-1, cfg.NNodes)
	}
	if len(cfg.Hosts) > 0 || cfg.LaunchAgent != nil {
		return "", 0, fmt.Errorf("%w: --nnodes starts ranks on this node only: no -H, --hostfile or --launch-agent", ErrUsage)
	}
	h, p, err := net.SplitHostPort(cfg.Seed)
	if err == nil {
		port, err = strconv.Atoi(p)
	}
	if err != nil || h == "" || port < 1 || port > 65534 {
		return "", 0, fmt.Errorf("%w: --seed %q: want HOST:PORT with PORT below 65535 (the ranks gossip on PORT+1)", ErrUsage, cfg.Seed)
	}
	return h, port, nil
}

// meetNodes runs the check-in: node 0 serves it, the others dial it.
func meetNodes(ctx context.Context, cfg Config, host string, port int, token string) error {
	timeout := cfg.SeedTimeout
	if timeout <= 0 {
		timeout = DefaultSeedTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	me := checkIn{NNodes: cfg.NNodes, NP: cfg.NP, NodeRank: cfg.NodeRank}
	if cfg.NodeRank == 0 {
		return serveCheckIn(ctx, me, port, token, timeout)
	}
	return dialCheckIn(ctx, me, net.JoinHostPort(host, strconv.Itoa(port)), token, timeout)
}

func serveCheckIn(ctx context.Context, me checkIn, port int, token string, timeout time.Duration) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", net.JoinHostPort("", strconv.Itoa(port)))
	if err != nil {
		return fmt.Errorf("%w: --seed port %d: %v", ErrLaunch, port, err)
	}
	defer ln.Close()
	go func() { <-ctx.Done(); ln.Close() }()
	conns := map[int]net.Conn{}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	reply := func(c net.Conn, msg string) {
		a := checkIn{NNodes: me.NNodes, NP: me.NP, Err: msg}
		a.MAC = a.sign(token)
		c.SetWriteDeadline(time.Now().Add(5 * time.Second))
		json.NewEncoder(c).Encode(a)
	}
	fail := func(msg string) error {
		for _, c := range conns {
			reply(c, msg)
		}
		return fmt.Errorf("%w: %s", ErrLaunch, msg)
	}
	for len(conns) < me.NNodes-1 {
		c, err := ln.Accept()
		if err != nil && errors.Is(context.Cause(ctx), ErrInterrupted) {
			return fail(context.Cause(ctx).Error()) // the others say "node 0: " first
		}
		if err != nil {
			missing := []int{}
			for r := 1; r < me.NNodes; r++ {
				if conns[r] == nil {
					missing = append(missing, r)
				}
			}
			return fail(fmt.Sprintf("nodes %v did not check in at the seed within %v", missing, timeout))
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		var in checkIn
		if err := json.NewDecoder(bufio.NewReader(c)).Decode(&in); err != nil {
			c.Close() // not a gorun node (a probe, a port scan): ignore it
			continue
		}
		var msg string
		switch {
		case !hmac.Equal([]byte(in.MAC), []byte(in.sign(token))):
			msg = fmt.Sprintf("node %d has another job token (GORUN_JOB_TOKEN differs)", in.NodeRank)
		case in.NNodes != me.NNodes:
			msg = fmt.Sprintf("node %d has --nnodes %d, node 0 has --nnodes %d", in.NodeRank, in.NNodes, me.NNodes)
		case in.NP != me.NP:
			msg = fmt.Sprintf("node %d has -np %d, node 0 has -np %d", in.NodeRank, in.NP, me.NP)
		case in.NodeRank < 1 || in.NodeRank >= me.NNodes:
			msg = fmt.Sprintf("a node has --node-rank %d, want 1..%d", in.NodeRank, me.NNodes-1)
		case conns[in.NodeRank] != nil:
			msg = fmt.Sprintf("two nodes have --node-rank %d", in.NodeRank)
		}
		if msg != "" {
			reply(c, msg)
			c.Close()
			return fail(msg)
		}
		conns[in.NodeRank] = c
	}
	for _, c := range conns {
		reply(c, "")
	}
	return nil
}

func dialCheckIn(ctx context.Context, me checkIn, addr, token string, timeout time.Duration) error {
	me.MAC = me.sign(token)
	var d net.Dialer
	var c net.Conn
	var err error
	for {
		if c, err = d.DialContext(ctx, "tcp", addr); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: the seed %s (node 0's gorun) did not answer within %v: %v", ErrLaunch, addr, timeout, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
	defer c.Close()
	go func() { <-ctx.Done(); c.Close() }()
	if err := json.NewEncoder(c).Encode(me); err != nil {
		return fmt.Errorf("%w: seed %s: %v", ErrLaunch, addr, err)
	}
	var a checkIn
	if err := json.NewDecoder(c).Decode(&a); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("%w: the other nodes did not all check in at the seed %s within %v", ErrLaunch, addr, timeout)
		}
		return fmt.Errorf("%w: seed %s: %v", ErrLaunch, addr, err)
	}
	if !hmac.Equal([]byte(a.MAC), []byte(a.sign(token))) {
		return fmt.Errorf("%w: seed %s answered with another job token (GORUN_JOB_TOKEN differs)", ErrLaunch, addr)
	}
	if a.Err != "" {
		return fmt.Errorf("%w: node 0: %s", ErrLaunch, a.Err)
	}
	return nil
}

// nodeSlots are this node's ranks in a multi-node job.
func nodeSlots(cfg Config) []Slot {
	s := make([]Slot, cfg.NP)
	for i := range s {
		s[i] = Slot{Rank: cfg.NodeRank*cfg.NP + i, LocalRank: i, LocalSize: cfg.NP}
	}
	return s
}
