package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gorun-hpc/gorun/comm"
	"github.com/gorun-hpc/gorun/ddp"
)

// Elastic training: when a step fails because a peer died, the survivors
// shrink the communicator and go on with fewer ranks.
//
// The rule for the parameters: every rank keeps a copy of them at the
// start of each step and, after a failure, rolls back to it. A rank may
// fail a step that another rank completed (its allreduce got every piece
// before the victim died, and it went on to the next step and failed
// there), so the survivors agree on the latest failed step S (allreduce
// Max), and the lowest new rank that failed at S, whose copy is the
// parameters at the start of S (identical on every rank that completed
// S-1), broadcasts them. Every survivor then redoes step S with the data
// re-sharded over the new size: step s's global batch is still the block
// of size*batch samples at s*size*batch, now with the smaller size.

// peerLost reports whether err is the failure of a peer (it died or
// closed), which elastic training recovers from.
func peerLost(err error) bool {
	return errors.Is(err, comm.ErrPeerFailed) || errors.Is(err, comm.ErrPeerClosed)
}

// snapshot copies the parameter values.
func snapshot(m *mlp, into [][]float32) [][]float32 {
	if into == nil {
		into = make([][]float32, len(m.params))
	}
	for i, p := range m.params {
		into[i] = append(into[i][:0], p.Value...)
	}
	return into
}

func restore(m *mlp, from [][]float32) {
	for i, p := range m.params {
		copy(p.Value, from[i])
	}
}

// recovery describes one Shrink, for the log and the tests.
type recovery struct {
	step      int           // the step redone on the new communicator
	dead      []int         // ranks (as gorun numbered them) lost since the failed step
	oldSize   int           // size before
	size      int           // size after
	shrink    time.Duration // from the failed step's error to Shrink's return
	firstStep time.Duration // from the failed step's error to the first step completed after Shrink
	sinceGood time.Duration // from the end of the last good step to the error: bounds the detection time
	failedAt  time.Time
}

func (r recovery) String() string {
	dead := make([]string, len(r.dead))
	for i, d := range r.dead {
		dead[i] = fmt.Sprint(d)
	}
	who := "rank " + strings.Join(dead, ", rank ")
	if len(r.dead) == 0 {
		who = "no rank"
	}
	return fmt.Sprintf("%s died at step %d; continuing with %d ranks", who, r.step, r.size)
}

// elasticState is what recoverStep needs across failures.
type elasticState struct {
	c        *comm.Comm // the current communicator
	shrunk   []*comm.Comm
	origRank int   // rank in the first communicator: identifies a rank across shrinks
	members  []int // the first communicator's ranks of the current one's members
}

// recoverStep shrinks st.c after a peer failure seen at step (err), agrees
// with the survivors on the step to redo and its parameters, and returns
// the new bucketer and the step. saved holds the parameters at the start
// of step. It retries if another rank dies meanwhile.
func (st *elasticState) recoverStep(ctx context.Context, cfg trainConfig, model *mlp, saved [][]float32, step int, lastGood time.Time, err error) (*ddp.Bucketer[float32], int, recovery, error) {
	rec := recovery{failedAt: time.Now(), sinceGood: time.Since(lastGood), oldSize: st.c.Size()}
	for {
		restore(model, saved)
		nc, serr := st.c.Shrink(ctx)
		if serr != nil {
			return nil, 0, rec, fmt.Errorf("step %d failed (%v), and shrinking failed: %w", step, err, serr)
		}
		st.c = nc
		st.shrunk = append(st.shrunk, nc)
		rec.shrink = time.Since(rec.failedAt)
		b, redo, aerr := st.agree(ctx, cfg, model, step, &rec)
		if aerr == nil {
			rec.size = nc.Size()
			rec.step = redo
			return b, redo, rec, nil
		}
		if !peerLost(aerr) {
			return nil, 0, rec, aerr
		}
		err = aerr // another rank died while recovering: shrink again
	}
}

// agree runs on the new communicator: it finds who is gone, the step to
// redo and the rank whose copy of the parameters to take.
func (st *elasticState) agree(ctx context.Context, cfg trainConfig, model *mlp, step int, rec *recovery) (*ddp.Bucketer[float32], int, error) {
	c := st.c
	ranks := make([]int64, c.Size())
	if err := comm.AllGather(ctx, c, []int64{int64(st.origRank)}, ranks); err != nil {
		return nil, 0, err
	}
	// Ranks are named as in the first communicator, the ranks gorun
	// started, across any number of shrinks.
	// Across a retry, members changed only if this succeeded: rec.dead
	// collects every rank lost since the failed step, once.
	for _, r := range st.members {
		if !slices.Contains(ranks, int64(r)) {
			rec.dead = append(rec.dead, r)
		}
	}
	st.members = st.members[:0]
	for _, r := range ranks {
		st.members = append(st.members, int(r))
	}
	s := []int64{int64(step)}
	if err := comm.AllReduce(ctx, c, s, s, comm.Max); err != nil {
		return nil, 0, err
	}
	root := []int64{int64(c.Size())}
	if int64(step) == s[0] {
		root[0] = int64(c.Rank())
	}
	if err := comm.AllReduce(ctx, c, root, root, comm.Min); err != nil {
		return nil, 0, err
	}
	if err := ddp.BroadcastParameters(ctx, c, model.params, int(root[0])); err != nil {
		return nil, 0, err
	}
	b, err := ddp.NewBucketer(c, model.params, cfg.ddp)
	if err != nil {
		return nil, 0, err
	}
	return b, int(s[0]), nil
}

// maybeGrow admits the ranks waiting to join (restarted by gorun
// --max-restarts), at a step boundary every rank reaches: they agree on
// whether any wait (allreduce Max of Joiners), Grow, and share the step
// and the parameters (admit). It reports whether it grew.
//
// With fewer than cfg.waitNP ranks it does not go on without a joiner: it
// asks again every few milliseconds, for up to cfg.waitFor, as Horovod
// Elastic's --min-np holds training until enough workers are back. Every
// rank sees the same size, so they wait together; they stop together too,
// as the give-up is agreed in the same allreduce (Max of "my wait is
// over"): a rank that gave up on its own clock while another asked once
// more would leave that one waiting in the allreduce for it.
func (st *elasticState) maybeGrow(ctx context.Context, cfg trainConfig, model *mlp, step int) (*ddp.Bucketer[float32], bool, error) {
	var deadline time.Time
	for {
		over := int64(0)
		if !deadline.IsZero() && time.Now().After(deadline) {
			over = 1
		}
		k := []int64{int64(st.c.Joiners()), over}
		if err := comm.AllReduce(ctx, st.c, k, k, comm.Max); err != nil {
			return nil, false, err
		}
		if k[0] > 0 {
			break
		}
		if st.c.Size() >= cfg.waitNP {
			return nil, false, nil
		}
		if k[1] > 0 {
			return nil, false, fmt.Errorf("%d ranks, fewer than -wait-np %d, and no rank joined in %v", st.c.Size(), cfg.waitNP, cfg.waitFor)
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(cfg.waitFor)
		}
		select {
		case <-ctx.Done():
			return nil, false, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	nc, err := st.c.Grow(ctx)
	if err != nil {
		return nil, false, err
	}
	st.c = nc
	st.shrunk = append(st.shrunk, nc)
	b, _, err := st.admit(ctx, cfg, model, step, false)
	return b, err == nil, err
}

// admit runs on a communicator Grow made, on every rank: the lowest rank
// that was there before (not fresh) sends the step and the parameters;
// every rank learns the members and makes a new bucketer.
func (st *elasticState) admit(ctx context.Context, cfg trainConfig, model *mlp, step int, fresh bool) (*ddp.Bucketer[float32], int, error) {
	c := st.c
	root := []int64{int64(c.Rank())}
	if fresh {
		root[0] = int64(c.Size())
	}
	if err := comm.AllReduce(ctx, c, root, root, comm.Min); err != nil {
		return nil, 0, err
	}
	s := []int64{int64(step)}
	if err := comm.Broadcast(ctx, c, s, int(root[0])); err != nil {
		return nil, 0, err
	}
	if err := ddp.BroadcastParameters(ctx, c, model.params, int(root[0])); err != nil {
		return nil, 0, err
	}
	ranks := make([]int64, c.Size())
	if err := comm.AllGather(ctx, c, []int64{int64(st.origRank)}, ranks); err != nil {
		return nil, 0, err
	}
	st.members = st.members[:0]
	for _, r := range ranks {
		st.members = append(st.members, int(r))
	}
	b, err := ddp.NewBucketer(c, model.params, cfg.ddp)
	return b, int(s[0]), err
}

// close closes the communicators Shrink made.
func (st *elasticState) close() {
	for _, c := range st.shrunk {
		c.Close()
	}
}
