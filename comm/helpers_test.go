package comm

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/internal/kernels"
)

// newLocal returns n in-process ranks closed at the end of the test.
func newLocal(t testing.TB, n int, opts ...Option) []*Comm {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs, err := NewLocal(ctx, n, opts...)
	if err != nil {
		t.Fatalf("NewLocal(%d): %v", n, err)
	}
	t.Cleanup(func() {
		for _, c := range cs {
			c.Close()
		}
	})
	return cs
}

// onAll runs f on every rank concurrently and returns the errors by rank.
func onAll(cs []*Comm, f func(c *Comm) error) []error {
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(c)
		}()
	}
	wg.Wait()
	return errs
}

// mustAll fails the test if any rank failed.
func mustAll(t testing.TB, what string, errs []error) {
	t.Helper()
	// Every failing rank, not the first only: the first is often one that
	// saw a peer fail, and the cause is on another rank.
	var msg strings.Builder
	for r, err := range errs {
		if err != nil {
			fmt.Fprintf(&msg, "\n  rank %d: %v", r, err)
		}
	}
	if msg.Len() > 0 {
		t.Fatalf("%s:%s", what, msg.String())
	}
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func isFloat[T Number]() bool {
	switch DTypeOf[T]() {
	case kernels.Float32, kernels.Float64, kernels.F16, kernels.BF16:
		return true
	}
	return false
}

func isUnsigned[T Number]() bool {
	switch DTypeOf[T]() {
	case kernels.Uint8, kernels.Uint16, kernels.Uint32, kernels.Uint64:
		return true
	}
	return false
}

// fromInt converts a small integer to T (fp16/bf16 by value, not bits).
func fromInt[T Number](v int) T {
	var z T
	switch any(z).(type) {
	case Float16:
		return any(F16From(float32(v))).(T)
	case BFloat16:
		return any(BF16From(float32(v))).(T)
	case float32:
		return any(float32(v)).(T)
	case float64:
		return any(float64(v)).(T)
	case int8:
		return any(int8(v)).(T)
	case int16:
		return any(int16(v)).(T)
	case int32:
		return any(int32(v)).(T)
	case int64:
		return any(int64(v)).(T)
	case uint8:
		return any(uint8(v)).(T)
	case uint16:
		return any(uint16(v)).(T)
	case uint32:
		return any(uint32(v)).(T)
	case uint64:
		return any(uint64(v)).(T)
	case int:
		return any(v).(T)
	case uint:
		return any(uint(v)).(T)
	}
	panic("unreachable")
}

// gen is rank r's input element i for op: small integers, so that float
// sums are exact in float32/float64 and products stay powers of two.
func gen[T Number](r, i int, op Op) T {
	if op == Prod {
		switch {
		case (r+i)%13 == 0:
			return fromInt[T](2)
		case !isUnsigned[T]() && (r*3+i)%5 == 0:
			return fromInt[T](-1)
		}
		return fromInt[T](1)
	}
	if isUnsigned[T]() {
		return fromInt[T]((r*7 + i*13 + 3) % 11)
	}
	return fromInt[T]((r*7+i*13+3)%11 - 5)
}

// epsOf is the relative rounding error of T's arithmetic.
func epsOf[T Number]() float64 {
	switch DTypeOf[T]() {
	case kernels.Float32:
		return 1.2e-7
	case kernels.Float64:
		return 2.3e-16
	case kernels.F16:
		return 1.0 / 1024
	case kernels.BF16:
		return 1.0 / 128
	}
	return 0
}

// checker compares a reduction of n ranks' gen inputs at positions
// [base, base+len(got)). Integers, Min and Max must be exact; float sums
// and averages are within n·eps·Σ|x| + eps·|ref| (reassociation and the
// final rounding to T).
func checkReduced[T Number](n int, op Op, base int, got []T) error {
	for j, g := range got {
		i := base + j
		if !isFloat[T]() {
			acc := []T{gen[T](0, i, op)}
			for r := 1; r < n; r++ {
				kernels.Reduce(op, acc, []T{gen[T](r, i, op)})
			}
			if op == Avg {
				kernels.Scale(acc, n)
			}
			if g != acc[0] {
				return fmt.Errorf("element %d = %v, want %v", i, g, acc[0])
			}
			continue
		}
		ref, abs := ToFloat64(gen[T](0, i, op)), math.Abs(ToFloat64(gen[T](0, i, op)))
		for r := 1; r < n; r++ {
			x := ToFloat64(gen[T](r, i, op))
			abs += math.Abs(x)
			switch op {
			case Sum, Avg:
				ref += x
			case Prod:
				ref *= x
			case Min:
				ref = math.Min(ref, x)
			case Max:
				ref = math.Max(ref, x)
			}
		}
		if op == Avg {
			ref /= float64(n)
			abs /= float64(n)
		}
		eps := epsOf[T]()
		tol := float64(n)*eps*abs + eps*math.Abs(ref)
		if op == Min || op == Max || op == Prod {
			tol = 0
		}
		if d := math.Abs(ToFloat64(g) - ref); !(d <= tol) {
			return fmt.Errorf("element %d = %v, want %v ± %g", i, ToFloat64(g), ref, tol)
		}
	}
	return nil
}

// pattern is a bit pattern for data-movement checks: exact, and distinct
// per rank and position.
func pattern[T Number](r, i int) T {
	return fromInt[T]((r*31 + i*7 + 1) % 97)
}

// initRanks starts n ranks of one job through Init in this process (tcp),
// rank r with opts(r), and returns each one's communicator and error, and
// start, which starts rank r of the job again (a joiner, once the job
// has moved on).
func initRanks(t *testing.T, n int, opts func(r int) []Option) (cs []*Comm, errs []error, start func(r int) (*Comm, error)) {
	t.Helper()
	seed := "127.0.0.1:" + strconv.Itoa(initFreePort(t))
	job, token := "init-"+initRandomID(), initRandomID()
	var mu sync.Mutex
	var made []*Comm
	start = func(r int) (*Comm, error) {
		c, err := initFromEnv(initTestCtx(t), initVars(initRankVars(r, n, seed, job, token)),
			append([]Option{WithTransport("tcp"), WithTimeout(30 * time.Second)}, opts(r)...)...)
		mu.Lock()
		made = append(made, c)
		mu.Unlock()
		return c, err
	}
	cs, errs = make([]*Comm, n), make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() { cs[r], errs[r] = start(r) })
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, c := range made {
			if c != nil {
				c.Close()
			}
		}
	})
	return cs, errs, start
}

// growJoined starts a joiner with start while members, the ranks of a
// running communicator indexed by rank, wait until each sees it waiting,
// then Grow; it returns the grown communicators by rank, the joiner's at
// its own.
func growJoined(t *testing.T, ctx context.Context, members []*Comm, start func() (*Comm, error)) []*Comm {
	t.Helper()
	var back *Comm
	joined := make(chan error, 1)
	go func() {
		var err error
		back, err = start()
		joined <- err
	}()
	grown := make([]*Comm, len(members)+1)
	mustAll(t, "grow", onAll(members, func(c *Comm) (err error) {
		for c.Joiners() == 0 { // each sees the joiner, then Grows
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
		}
		grown[c.Rank()], err = c.Grow(ctx)
		return err
	}))
	if err := <-joined; err != nil {
		t.Fatalf("joining: %v", err)
	}
	grown[back.Rank()] = back
	return grown
}
