// Command soak runs mixed collectives — random collective, element type,
// reduction op, size and root — for a bounded time and checks every
// result against a reference computed locally from every rank's input.
// It reports resident memory after warm-up and at the end, and exits
// non-zero on a wrong result, an unexpected error, or memory that keeps
// growing.
//
//	gorun -np 4 ./examples/soak -duration 1m
//	go run ./examples/soak -local 4 -duration 30s   # 4 ranks in one process
//
// Every rank draws the same sequence of steps from a seed that rank 0
// broadcasts first (-seed fixes it, to replay a failure).
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorun-hpc/gorun/comm"
)

func main() {
	duration := flag.Duration("duration", 10*time.Minute, "how long to run (1m in CI)")
	seed := flag.Int64("seed", 0, "step sequence seed (0: rank 0 picks one)")
	maxCount := flag.Int("max-count", 1<<15, "largest element count per rank (per block)")
	local := flag.Int("local", 0, "run this many ranks in this process instead of joining a job")
	transport := flag.String("transport", "", "provider for -local (default mem; GORUN_TRANSPORT otherwise)")
	warmup := flag.Duration("warmup", 0, "when to take the warm-up memory reading (default: a tenth of -duration, at most 1m)")
	memprofile := flag.String("memprofile", "", "write a heap profile here at the end")
	elastic := flag.Bool("elastic", false, "survive rank deaths (Shrink) and admit restarted ranks (Grow): run under gorun --elastic --max-restarts (elastic.go)")
	flag.Parse()
	if *warmup == 0 {
		*warmup = min(*duration/10, time.Minute)
	}
	ctx := context.Background()
	var comms []*comm.Comm
	var err error
	if *local > 0 {
		var opts []comm.Option
		if *transport != "" {
			opts = append(opts, comm.WithTransport(*transport))
		}
		comms, err = comm.NewLocal(ctx, *local, opts...)
	} else {
		var c *comm.Comm
		c, err = comm.Init(ctx)
		comms = []*comm.Comm{c}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(2)
	}
	if *elastic {
		if len(comms) != 1 {
			fmt.Fprintln(os.Stderr, "soak: -elastic needs a job started by gorun, not -local")
			os.Exit(2)
		}
		if err := soakElastic(ctx, comms[0], *seed, *duration, *maxCount); err != nil {
			fmt.Fprintln(os.Stderr, "soak: FAIL:", err)
			os.Exit(1)
		}
		return
	}
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for i, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = soak(ctx, c, *seed, *duration, *warmup, *maxCount, *memprofile)
			c.Close()
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintln(os.Stderr, "soak: FAIL:", err)
		os.Exit(1)
	}
}

// soak runs steps on c until duration has passed (rank 0 decides, so that
// every rank runs the same number of steps).
func soak(ctx context.Context, c *comm.Comm, seed int64, duration, warmup time.Duration, maxCount int, memprofile string) error {
	me := c.Rank()
	sb := []int64{seed}
	if me == 0 && seed == 0 {
		sb[0] = time.Now().UnixNano()
	}
	if err := comm.Broadcast(ctx, c, sb, 0); err != nil {
		return fmt.Errorf("rank %d: seed broadcast: %w", me, err)
	}
	rng := rand.New(rand.NewPCG(uint64(sb[0]), 2))
	if me == 0 {
		fmt.Printf("soak: %d ranks, seed %d, %v, counts up to %d\n", c.Size(), sb[0], duration, maxCount)
	}
	start := time.Now()
	var rssWarm int64
	counts := map[string]int{}
	var bytes int64
	more := []int32{1}
	lastReport, reportEvery := start, max(10*time.Second, duration/10)
	for iter := 0; ; iter++ {
		if iter%16 == 0 { // rank 0 says whether to go on
			more[0] = 0
			if time.Since(start) < duration {
				more[0] = 1
			}
			if err := comm.Broadcast(ctx, c, more, 0); err != nil {
				return fmt.Errorf("rank %d: control broadcast at step %d: %w", me, iter, err)
			}
			if more[0] == 0 {
				break
			}
			if rssWarm == 0 && time.Since(start) >= warmup {
				rssWarm = rss()
			}
			if me == 0 && time.Since(lastReport) >= reportEvery {
				lastReport = time.Now()
				fmt.Printf("soak: %v: step %d, RSS %.1f MiB, live Go heap %.1f MiB\n", time.Since(start).Round(time.Second), iter,
					float64(rss())/(1<<20), float64(liveHeap())/(1<<20))
			}
		}
		s := draw(rng, iter, c.Size(), maxCount)
		n, err := run(ctx, c, s)
		if err != nil {
			return fmt.Errorf("rank %d: %v: %w", me, s, err)
		}
		counts[s.coll]++
		bytes += int64(n)
	}
	if memprofile != "" && me == 0 {
		writeHeapProfile(memprofile)
	}
	// Meet before the last memory reading, so every rank reads it at the
	// same point.
	if err := c.Barrier(ctx); err != nil {
		return fmt.Errorf("rank %d: final barrier: %w", me, err)
	}
	end := rss()
	if rssWarm == 0 {
		rssWarm = end
	}
	total := 0
	for _, n := range counts {
		total += n
	}
	fmt.Printf("soak: rank %d: %d steps (%s), %.1f MiB moved, RSS after warm-up %.1f MiB, at the end %.1f MiB\n",
		me, total, summary(counts), float64(bytes)/(1<<20), float64(rssWarm)/(1<<20), float64(end)/(1<<20))
	// Flat means within a quarter plus 32 MiB of the warm-up figure (the Go
	// heap breathes; a leak per step grows without bound).
	if end > rssWarm+rssWarm/4+32<<20 {
		return fmt.Errorf("rank %d: resident memory grew from %.1f to %.1f MiB", me, float64(rssWarm)/(1<<20), float64(end)/(1<<20))
	}
	return nil
}

func summary(counts map[string]int) string {
	var parts []string
	for _, c := range colls {
		if counts[c] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", c, counts[c]))
		}
	}
	return strings.Join(parts, ", ")
}

// writeHeapProfile saves the live heap before Close, to find what grows.
func writeHeapProfile(path string) {
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		return
	}
	defer f.Close()
	runtime.GC()
	pprof.WriteHeapProfile(f)
}

// liveHeap is the Go heap still reachable after a collection.
func liveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// rss is this process's resident set size in bytes (VmRSS), or 0.
func rss() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}
