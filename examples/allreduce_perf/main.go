// Command allreduce_perf measures AllReduce the way nccl-tests'
// all_reduce_perf does and prints the same table: for each size, the time,
// algorithm bandwidth (bytes/time) and bus bandwidth (algbw·2(n-1)/n) of an
// out-of-place and an in-place AllReduce, and the number of wrong elements.
// With -coll broadcast it measures Broadcast from root 0 instead (busbw =
// algbw, as in nccl-tests; both columns are in place), and with -coll
// allgather or reducescatter AllGather or ReduceScatter (as nccl-tests'
// all_gather_perf and reduce_scatter_perf: the size is the gathered output,
// or the reduced input, of n blocks; busbw = algbw·(n-1)/n); the redop
// column of those without a reduction says "none", as nccl-tests'. Each call is
// timed after a barrier, as bench/compare's MPI and Gloo programs do;
// -batch times the calls back to back, as nccl-tests does. -sizes a,b,c
// lists the sizes explicitly; -cpuprofile FILE profiles the run. A launched rank
// sets GOMAXPROCS to the CPUs per local rank (see setProcs; -procs).
//
// Standalone it runs -np ranks in this process (comm.NewLocal over -t,
// default mem). Started by a launcher (comm.Launched: GORUN_SIZE,
// OMPI_COMM_WORLD_SIZE, PMI_SIZE, SLURM_NTASKS or WORLD_SIZE set) it joins
// the job with comm.Init and rank 0
// prints the table. It exits 1 if any result is wrong.
//
//	allreduce_perf -b 8 -e 128M -f 2 -n 20 -w 5 -c 1 -d float -o sum -np 4
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/gorun-hpc/gorun/comm"
)

type options struct {
	minBytes, maxBytes int64
	factor             int
	iters, warmup      int
	check              bool
	batch              bool // time the calls back to back (-batch)
	dtype, op, algo    string
	np                 int
	transport          string
	procs              int     // GOMAXPROCS of a launched rank: 0 cores per local rank, -1 Go's default
	coll               string  // allreduce, broadcast, allgather, reducescatter or barrier
	sizes              []int64 // explicit sizes; overrides -b/-e/-f when set
}

func main() {
	var o options
	var minB, maxB string
	flag.StringVar(&minB, "b", "8", "minimum size in bytes (K, M, G suffixes)")
	flag.StringVar(&maxB, "e", "32M", "maximum size in bytes")
	flag.IntVar(&o.factor, "f", 2, "multiplication factor between sizes")
	flag.IntVar(&o.iters, "n", 20, "iterations per size")
	flag.IntVar(&o.warmup, "w", 5, "warmup iterations per size")
	check := flag.Int("c", 1, "check results (0/1)")
	flag.BoolVar(&o.batch, "batch", false, "time the -n calls back to back after one barrier, as nccl-tests does (default: each call after a barrier, as bench/compare's MPI and Gloo programs)")
	flag.StringVar(&o.dtype, "d", "float", "type: int8 uint8 int32 uint32 int64 uint64 half bfloat16 float double (or int16 uint16)")
	flag.StringVar(&o.op, "o", "sum", "op: sum prod min max avg")
	flag.StringVar(&o.algo, "a", "", "allreduce algorithm: ring tree rd hd (default: the selection table)")
	flag.IntVar(&o.np, "np", 4, "ranks in this process when not started by a launcher")
	flag.StringVar(&o.transport, "t", "mem", "transport for -np ranks in this process")
	flag.IntVar(&o.procs, "procs", 0, "GOMAXPROCS of a launched rank: 0 = CPUs per local rank (unless $GOMAXPROCS is set), -1 = Go's default")
	flag.StringVar(&o.coll, "coll", "allreduce", "collective: allreduce, broadcast (root 0; busbw = algbw), allgather, reducescatter (size: all n blocks) or barrier (one row, size 0)")
	sizeList := flag.String("sizes", "", "comma-separated sizes in bytes (K, M, G suffixes); overrides -b, -e, -f")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the run to this file (launched rank r > 0: FILE.r)")
	flag.Parse()
	o.check = *check != 0
	var err error
	if o.minBytes, err = parseSize(minB); err == nil {
		o.maxBytes, err = parseSize(maxB)
	}
	if err == nil && *sizeList != "" {
		for _, f := range strings.Split(*sizeList, ",") {
			var v int64
			if v, err = parseSize(strings.TrimSpace(f)); err != nil {
				break
			}
			o.sizes = append(o.sizes, v)
		}
	}
	if err == nil && !slices.Contains([]string{"allreduce", "broadcast", "allgather", "reducescatter", "barrier"}, o.coll) {
		err = fmt.Errorf("unknown collective %q", o.coll)
	}
	if err == nil && (o.factor < 2 || o.iters < 1 || o.warmup < 0 || o.minBytes > o.maxBytes) {
		err = fmt.Errorf("bad -f, -n, -w, -b or -e")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "allreduce_perf:", err)
		os.Exit(2)
	}
	if *cpuprofile != "" {
		if li, _ := comm.LaunchInfo(); li.Rank > 0 {
			*cpuprofile += "." + strconv.Itoa(li.Rank) // launched ranks share the flag
		}
		f, perr := os.Create(*cpuprofile)
		if perr == nil {
			perr = pprof.StartCPUProfile(f)
		}
		if perr != nil {
			fmt.Fprintln(os.Stderr, "allreduce_perf:", perr)
			os.Exit(2)
		}
	}
	wrong, err := run(context.Background(), o, os.Stdout)
	if *cpuprofile != "" {
		pprof.StopCPUProfile()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "allreduce_perf:", err)
		os.Exit(1)
	}
	if wrong > 0 {
		os.Exit(1)
	}
}

// setProcs sets GOMAXPROCS for a rank launched one per process, as MPI
// ranks are single-threaded: with Go's default every rank runs NumCPU Ps,
// so local ranks oversubscribe the cores and each hand-off between a
// link's progress goroutine and the engine may wake another OS thread
// (13-20 µs across vCPUs here). Measured on this 2-core host, 2 ranks shm:
// 8 B 84 -> 6-27 µs, 1 MiB 2.3 -> 5.0-5.8 GB/s, 16 MiB 3.5 -> 6.3 GB/s busbw
// (see bench/compare/RESULTS.md).
func setProcs(procs, localSize int) {
	switch {
	case procs > 0:
		runtime.GOMAXPROCS(procs)
	case procs == 0 && os.Getenv("GOMAXPROCS") == "":
		runtime.GOMAXPROCS(max(1, runtime.NumCPU()/max(1, localSize)))
	}
}

// run makes the communicator(s) and runs the table; it returns the total
// number of wrong elements.
func run(ctx context.Context, o options, out io.Writer) (int64, error) {
	var opts []comm.Option
	if o.algo != "" {
		opts = append(opts, comm.WithAlgorithm("allreduce:"+o.algo))
	}
	var comms []*comm.Comm
	if comm.Launched() {
		li, err := comm.LaunchInfo()
		if err != nil {
			return 0, err
		}
		local := li.LocalSize
		if local > 0 {
			setProcs(o.procs, local) // before Init: its goroutines start on the final Ps
		}
		c, err := comm.Init(ctx, opts...)
		if err != nil {
			return 0, err
		}
		if local <= 0 {
			setProcs(o.procs, c.LocalSize())
		}
		comms = []*comm.Comm{c}
	} else {
		cs, err := comm.NewLocal(ctx, o.np, append(opts, comm.WithTransport(o.transport))...)
		if err != nil {
			return 0, err
		}
		comms = cs
	}
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	bench, ok := benches[o.dtype]
	if o.coll == "barrier" {
		bench = perfBarrier
	}
	if !ok {
		return 0, fmt.Errorf("unknown type %q", o.dtype)
	}
	op, ok := ops[o.op]
	if !ok {
		return 0, fmt.Errorf("unknown op %q", o.op)
	}
	var wrong int64
	var first error
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := io.Discard
			if c.Rank() == 0 {
				w = out
			}
			n, err := bench(ctx, c, o, op, w)
			mu.Lock()
			defer mu.Unlock()
			if err != nil && first == nil {
				first = fmt.Errorf("rank %d: %w", c.Rank(), err)
			}
			if c.Rank() == 0 {
				wrong = n
			}
		}()
	}
	wg.Wait()
	return wrong, first
}

var ops = map[string]comm.Op{"sum": comm.Sum, "prod": comm.Prod, "min": comm.Min, "max": comm.Max, "avg": comm.Avg}

// redop is the table's redop: -o for the collectives that reduce, "none"
// for those that do not (broadcast, allgather, barrier), as nccl-tests
// prints it.
func (o options) redop() string {
	if o.coll == "allreduce" || o.coll == "reducescatter" {
		return o.op
	}
	return "none"
}

type benchFunc func(ctx context.Context, c *comm.Comm, o options, op comm.Op, w io.Writer) (int64, error)

var benches = map[string]benchFunc{
	"int8": perf[int8], "uint8": perf[uint8], "int16": perf[int16], "uint16": perf[uint16],
	"int32": perf[int32], "int": perf[int32], "uint32": perf[uint32], "int64": perf[int64], "uint64": perf[uint64],
	"half": perf[comm.Float16], "float16": perf[comm.Float16], "bfloat16": perf[comm.BFloat16],
	"float": perf[float32], "float32": perf[float32], "double": perf[float64], "float64": perf[float64],
}

func parseSize(s string) (int64, error) {
	mult := int64(1)
	switch {
	case strings.HasSuffix(s, "G"):
		mult, s = 1<<30, strings.TrimSuffix(s, "G")
	case strings.HasSuffix(s, "M"):
		mult, s = 1<<20, strings.TrimSuffix(s, "M")
	case strings.HasSuffix(s, "K"):
		mult, s = 1<<10, strings.TrimSuffix(s, "K")
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("bad size %q", s)
	}
	return v * mult, nil
}
