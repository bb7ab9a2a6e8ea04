package ddp

import (
	"context"
	"errors"
	"fmt"
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
	traced  sync.WaitGroup // bucket spans not yet ended (timeline only)
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
// after SetNoSync(false) reduces the accumulated gradients.
func (b *Bucketer[T]) SetNoSync(on bool) { b.noSync = on }

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
		for b.next < len(b.buckets) && b.buckets[b.next].pending == 0 {
			b.launch(ctx, b.buckets[b.next])
			b.next++
		}
	}
	return nil
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
		bk.req = comm.IAllReduce(ctx, b.c, bk.data, bk.data, b.cfg.Op)
	}
}

// Wait completes the step's communication: it starts, in index order, the
// buckets not yet started (those with a parameter never marked ready, which
// contributes what its Grad holds: zeros after ZeroGrad), waits for every
// bucket, and leaves the reduced gradients in each Param's Grad. In no-sync
// mode it only resets the ready marks.
func (b *Bucketer[T]) Wait(ctx context.Context) error {
	defer b.waitTraced(ctx)
	defer b.reset()
	if b.noSync {
		return nil
	}
	var errs []error
	for ; b.next < len(b.buckets); b.next++ {
		b.launch(ctx, b.buckets[b.next])
	}
	for i, bk := range b.buckets {
		err := bk.req.Wait(ctx)
		bk.req = nil
		if err != nil {
			errs = append(errs, fmt.Errorf("ddp: bucket %d: %w", i, err))
			continue
		}
		switch {
		case bk.wire16 != nil:
			for j, v := range bk.wire16 {
				bk.data[j] = T(v.Float32())
			}
		case bk.wireB16 != nil:
			for j, v := range bk.wireB16 {
				bk.data[j] = T(v.Float32())
			}
		}
	}
	return errors.Join(errs...)
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
