package ddp

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/gorun-hpc/gorun/comm"
)

// Compression selects the element type of gradients on the wire.
type Compression int

const (
	NoCompression Compression = iota
	FP16                      // IEEE half precision on the wire, partial sums too
	BF16                      // bfloat16 on the wire, partial sums too
)

// Config tunes a Bucketer. Zero fields take their defaults.
type Config struct {
	// BucketBytes caps a bucket. Default 25 MiB, DDP's bucket_cap_mb: large
	// enough to amortise per-call latency, small enough to overlap.
	BucketBytes int
	// FirstBucketBytes caps the first bucket to be reduced (the last
	// layers'). Default 1 MiB, as DDP, so communication starts early.
	FirstBucketBytes int
	// Op combines gradients: comm.Avg (default) or comm.Sum.
	Op comm.Op
	// OpSet must be true for Op to be taken as given (comm.Sum is the zero
	// Op, so the zero Config means Avg).
	OpSet       bool
	Compression Compression
	// UnevenInputs lets ranks run out of batches at different steps: a
	// rank that has no more calls Bucketer.Join. Each step then makes one
	// more allreduce, of one int64 (the number of ranks still training),
	// started with the step's first bucket; without it a step makes only
	// its buckets' allreduces. Op must be Avg or Sum.
	UnevenInputs bool
}

func (c Config) withDefaults() Config {
	if c.BucketBytes <= 0 {
		c.BucketBytes = 25 << 20
	}
	if c.FirstBucketBytes <= 0 {
		c.FirstBucketBytes = 1 << 20
	}
	if !c.OpSet {
		c.Op = comm.Avg
	}
	return c
}

// Bucketer fuses gradients into buckets and reduces each bucket across
// ranks as soon as all its gradients are ready.
type Bucketer[T Float] struct {
	c       *comm.Comm
	cfg     Config
	params  []*Param[T]
	buckets []*bucket[T]
	of      []int // param index -> bucket index
	next    int   // the first bucket of this step not yet started
	wireOp  comm.Op
	div     T // with compression and Avg: the world size, divided by before rounding
	noSync  bool
	ready   []bool
	// With UnevenInputs: the step's count of ranks still training, its
	// allreduce (nil before the step's first bucket starts), and the steps
	// reduced since NewBucketer or the last Join.
	count    []int64
	countReq *comm.Request
	steps    int
	traced   sync.WaitGroup // bucket spans not yet ended (timeline only)
	// The timeline's rows: "ddp" and "ddp bucket N" on the world
	// communicator, with " (comm K)" after them on another, so that two
	// Bucketers' spans do not share rows.
	readyLane, bucketLane string
}

type bucket[T Float] struct {
	data    []T
	wire16  []comm.Float16
	wireB16 []comm.BFloat16
	pending int // parameters not yet marked ready
	size    int // parameters in the bucket
	req     *comm.Request
	idx     int
}

// NewBucketer assigns params to buckets in reverse order (the backward pass
// produces the last layers' gradients first) and turns every Grad into a
// view of its bucket. Its allreduces run on c; another Bucketer needs a
// communicator of its own (see the package comment).
func NewBucketer[T Float](c *comm.Comm, params []*Param[T], cfg Config) (*Bucketer[T], error) {
	cfg = cfg.withDefaults()
	b := &Bucketer[T]{c: c, cfg: cfg, params: params, of: make([]int, len(params)), ready: make([]bool, len(params)), wireOp: cfg.Op, div: 1,
		readyLane: "ddp", bucketLane: "ddp bucket %d"}
	if c != nil {
		if l := c.TraceLane(); l != "" && l != "comm" {
			b.readyLane, b.bucketLane = "ddp ("+l+")", "ddp bucket %d ("+l+")"
		}
	}
	if cfg.Compression != NoCompression && cfg.Op == comm.Avg {
		// Average as torch's fp16_compress_hook does: divide, round, sum.
		// Partial sums travel in the wire type, and a sum of the ranks'
		// gradients may not fit where their average does.
		b.div, b.wireOp = T(c.Size()), comm.Sum
	}
	if cfg.UnevenInputs {
		if cfg.Op != comm.Avg && cfg.Op != comm.Sum {
			return nil, fmt.Errorf("ddp: UnevenInputs needs Op Avg or Sum (ranks that have joined add zeros)")
		}
		// Avg divides by the ranks still training, known when the step
		// ends (unpack): the wire sums.
		b.count, b.wireOp = make([]int64, 1), comm.Sum
	}
	elem := int(sizeOf[T]())
	limit := cfg.FirstBucketBytes
	var cur []int
	curBytes := 0
	flush := func() {
		if len(cur) == 0 {
			return
		}
		b.addBucket(cur, curBytes/elem)
		cur, curBytes = nil, 0
		limit = cfg.BucketBytes
	}
	for i := len(params) - 1; i >= 0; i-- {
		p := params[i]
		if err := p.check(); err != nil {
			return nil, fmt.Errorf("ddp: %w", err)
		}
		n := len(p.Value) * elem
		if curBytes > 0 && curBytes+n > limit {
			flush()
		}
		cur = append(cur, i)
		curBytes += n
	}
	flush()
	return b, nil
}

func (b *Bucketer[T]) addBucket(members []int, elems int) {
	bk := &bucket[T]{data: make([]T, elems), size: len(members), idx: len(b.buckets)}
	bk.pending = bk.size
	off := 0
	for _, i := range members {
		p := b.params[i]
		view := bk.data[off : off+len(p.Value) : off+len(p.Value)]
		copy(view, p.Grad)
		p.Grad = view
		b.of[i] = len(b.buckets)
		off += len(p.Value)
	}
	switch b.cfg.Compression {
	case FP16:
		bk.wire16 = make([]comm.Float16, elems)
	case BF16:
		bk.wireB16 = make([]comm.BFloat16, elems)
	}
	b.buckets = append(b.buckets, bk)
}

// Buckets is the number of buckets.
func (b *Bucketer[T]) Buckets() int { return len(b.buckets) }

// SetNoSync(true) accumulates gradients over several steps without
// communicating (DDP's no_sync): MarkReady and Wait do not reduce. The step
// after SetNoSync(false) reduces the accumulated gradients. Like entering
// or leaving torch's no_sync context, it is called between steps (before
// the step's first MarkReady, or after Wait): during a step, whose buckets
// may be in flight, it returns an error and changes nothing, and Wait
// completes the step in the mode it began in.
func (b *Bucketer[T]) SetNoSync(on bool) error {
	if on != b.noSync && (b.next > 0 || slices.Contains(b.ready, true)) {
		return fmt.Errorf("ddp: SetNoSync(%v) during a step (after MarkReady, before Wait): set it between steps", on)
	}
	b.noSync = on
	return nil
}

// ZeroGrad sets every gradient to zero.
func (b *Bucketer[T]) ZeroGrad() {
	for _, bk := range b.buckets {
		clear(bk.data)
	}
}

// MarkReady says parameter i's gradient is final for this step. Buckets
// start in index order on every rank, whatever each rank marks, so that the
// ranks' allreduces pair the same buckets: when i is the last of its bucket
// and every earlier bucket has started, the bucket's allreduce starts, and
// after it any later buckets already full. Bucket 0 holds the last
// parameters, so a backward pass that marks in reverse order starts each
// bucket as it fills.
func (b *Bucketer[T]) MarkReady(ctx context.Context, i int) error {
	if i < 0 || i >= len(b.params) {
		return fmt.Errorf("ddp: MarkReady(%d): %d parameters", i, len(b.params))
	}
	if b.ready[i] {
		return fmt.Errorf("ddp: parameter %q marked ready twice in one step", b.params[i].Name)
	}
	b.ready[i] = true
	b.c.TraceInstant(b.readyLane, "grad ready", int64(i))
	bk := b.buckets[b.of[i]]
	bk.pending--
	if bk.pending == 0 && bk.idx == b.next && !b.noSync {
		b.start(ctx, false)
	}
	return nil
}

// start starts, in index order from b.next, the buckets that are full
// (with all, every bucket left), after the step's count with UnevenInputs.
func (b *Bucketer[T]) start(ctx context.Context, all bool) {
	for b.next < len(b.buckets) && (all || b.buckets[b.next].pending == 0) {
		b.startCount(ctx)
		b.launch(ctx, b.buckets[b.next])
		b.next++
	}
}

// startCount starts the allreduce of the step's count of ranks still
// training (this one adds 1; one in Join, 0), if UnevenInputs is on and it
// has not started yet.
func (b *Bucketer[T]) startCount(ctx context.Context) {
	if b.count == nil || b.countReq != nil {
		return
	}
	b.count[0] = 1
	b.countReq = comm.IAllReduce(ctx, b.c, b.count, b.count, comm.Sum)
}

// active waits for the step's count: the ranks still training, or the
// world size without UnevenInputs.
func (b *Bucketer[T]) active(w *stepWait) (int, error) {
	if b.countReq == nil {
		return b.c.Size(), nil
	}
	err := w.wait(b.countReq)
	b.countReq = nil
	if err != nil {
		return 0, fmt.Errorf("ddp: count of ranks training: %w", err)
	}
	return int(b.count[0]), nil
}

func (b *Bucketer[T]) launch(ctx context.Context, bk *bucket[T]) {
	if b.c.Tracing() {
		sp := b.c.StartSpan(fmt.Sprintf(b.bucketLane, bk.idx), "bucket allreduce", int64(bk.idx))
		b.traced.Add(1)
		defer func() { go b.endWhenDone(ctx, bk.req, sp) }()
	}
	switch {
	case bk.wire16 != nil:
		for i, v := range bk.data {
			bk.wire16[i] = comm.F16From(float32(v / b.div))
		}
		bk.req = comm.IAllReduce(ctx, b.c, bk.wire16, bk.wire16, b.wireOp)
	case bk.wireB16 != nil:
		for i, v := range bk.data {
			bk.wireB16[i] = comm.BF16From(float32(v / b.div))
		}
		bk.req = comm.IAllReduce(ctx, b.c, bk.wireB16, bk.wireB16, b.wireOp)
	default:
		bk.req = comm.IAllReduce(ctx, b.c, bk.data, bk.data, b.wireOp)
	}
}

// Wait completes the step's communication: it starts, in index order, the
// buckets not yet started (those with a parameter never marked ready, which
// contributes what its Grad holds: zeros after ZeroGrad), waits for every
// bucket, and leaves the reduced gradients in each Param's Grad. With
// UnevenInputs, Avg is over the ranks that have not called Join. In no-sync
// mode it only resets the ready marks.
//
// If ctx ends before the step's allreduces do, Wait aborts the
// communicator (Comm.Abort, which fails the peers' operations too), waits
// for the allreduces to end, which the abort makes prompt, and returns a
// *comm.RankError naming this rank that wraps ctx's error. Either way,
// nothing writes the gradients once Wait has returned.
func (b *Bucketer[T]) Wait(ctx context.Context) error {
	defer b.waitTraced(ctx)
	defer b.reset()
	if b.noSync {
		return nil
	}
	b.start(ctx, true)
	b.startCount(ctx) // a Bucketer of no parameters
	w := &stepWait{ctx: ctx, c: b.c}
	active, err := b.active(w)
	if err == nil && b.count != nil {
		b.steps++
	}
	return errors.Join(err, b.finish(w, active))
}

// finish waits for every bucket's allreduce and, unless active is 0, leaves
// the reduced gradients in the buckets' data (active: the ranks the
// average is over).
func (b *Bucketer[T]) finish(w *stepWait, active int) error {
	var errs []error
	for i, bk := range b.buckets {
		err := w.wait(bk.req)
		bk.req = nil
		if err != nil {
			if !w.consequence(err) {
				errs = append(errs, fmt.Errorf("ddp: bucket %d: %w", i, err))
			}
			continue
		}
		if active > 0 {
			b.unpack(bk, active)
		}
	}
	return errors.Join(errs...)
}

// stepWait waits for a step's allreduces within ctx (Wait's or Join's).
// They write into the gradients (and the count), which belong to the
// caller again when Wait returns, so if ctx ends before one of them does,
// stepWait aborts the communicator, which ends every operation on it here
// and fails the peers', and waits for them to end rather than leave them
// running.
type stepWait struct {
	ctx context.Context
	c   *comm.Comm
	// After the abort: its reason, and the error of the allreduce that
	// ctx ended before.
	reason, err error
}

// wait waits for req (a step's allreduce) and returns its error, or, if
// ctx ends first, w.err once req has ended.
func (w *stepWait) wait(req *comm.Request) error {
	if w.reason != nil {
		return req.Wait(context.Background()) // ends with the abort
	}
	err := req.Wait(w.ctx)
	if err == nil {
		return nil
	}
	if done, opErr := req.Test(); done {
		return opErr
	}
	w.reason = fmt.Errorf("ddp: Wait's context ended before the step's allreduces: %w", w.ctx.Err())
	w.err = &comm.RankError{Rank: w.c.Rank(), Op: "allreduce", Err: fmt.Errorf("the context of ddp's Wait ended first, the communicator is aborted: %w", w.ctx.Err())}
	w.c.Abort(w.reason)
	req.Wait(context.Background()) // ends with the abort
	return w.err
}

// consequence says whether err is an allreduce's error from w's abort,
// which w.err already reports.
func (w *stepWait) consequence(err error) bool {
	return w.reason != nil && err != w.err && errors.Is(err, w.reason)
}

// unpack converts bucket bk's reduced gradients from the wire type and,
// with UnevenInputs and Avg, divides the sum by the active ranks.
func (b *Bucketer[T]) unpack(bk *bucket[T], active int) {
	mul := T(1)
	if b.count != nil && b.cfg.Op == comm.Avg {
		if bk.wire16 == nil && bk.wireB16 == nil {
			div := T(active)
			for j := range bk.data {
				bk.data[j] /= div // as comm's Avg rounds
			}
			return
		}
		mul = b.div / T(active) // the wire holds the sum over the world size; 1 with every rank active
	}
	switch {
	case bk.wire16 != nil:
		for j, v := range bk.wire16 {
			bk.data[j] = T(v.Float32()) * mul
		}
	case bk.wireB16 != nil:
		for j, v := range bk.wireB16 {
			bk.data[j] = T(v.Float32()) * mul
		}
	}
}

// waitTraced waits until the bucket spans have ended, so that they are
// in the timeline when Wait returns, or until ctx ends: a span ends when
// its allreduce does, which may outlast Wait's context (bounded by
// MarkReady's), and Wait must not.
func (b *Bucketer[T]) waitTraced(ctx context.Context) {
	if !b.c.Tracing() {
		return
	}
	done := make(chan struct{})
	go func() {
		b.traced.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// endWhenDone ends the timeline span of a bucket's allreduce (row "ddp
// bucket N", from its launch) when req completes (with tracing only).
func (b *Bucketer[T]) endWhenDone(ctx context.Context, req *comm.Request, sp comm.Span) {
	defer b.traced.Done()
	req.Wait(ctx)
	sp.End()
}

func (b *Bucketer[T]) reset() {
	clear(b.ready)
	b.next = 0
	b.countReq = nil
	for _, bk := range b.buckets {
		bk.pending = bk.size
		bk.req = nil
	}
}

func sizeOf[T Float]() uintptr {
	var z T
	switch any(z).(type) {
	case float64:
		return 8
	}
	return 4
}
