// Command train is data-parallel training of a small multilayer perceptron
// in plain Go on gorun: each rank trains on its shard of a synthetic
// classification set and gradients are averaged across ranks in fused
// buckets while the backward pass runs.
//
//	gorun -np 4 ./examples/train          # one process per rank
//	go run ./examples/train -np 4         # four ranks in one process
//	gorun -np 4 ./examples/train -uneven 2  # rank r runs out 2r batches early each epoch and joins (ddp's Join)
//
// Elastic: under gorun --elastic (or with -elastic), a step that fails
// because a rank died is redone on the survivors after Shrink: they roll
// back to the parameters at the start of the step, take those of the
// lowest surviving rank, re-shard the data for the new size and go on to
// the requested number of steps (elastic.go).
//
//	gorun --elastic -np 4 --fault 'rank=2:kill:write:200' ./examples/train -out /tmp/params
//
// Under gorun --max-restarts a restarted rank rejoins, and under gorun
// --max-np a rank that gorun --add-ranks starts joins: the running ranks
// admit them with Comm.Grow at the next step boundary (-regrow, on by
// default under either flag).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gorun-hpc/gorun/comm"
	"github.com/gorun-hpc/gorun/ddp"
	_ "github.com/gorun-hpc/gorun/transport/rdma/faulty" // gorun --fault (the reliability tests kill ranks mid-run)
)

func main() {
	cfg := defaultTrainConfig()
	np := flag.Int("np", 4, "ranks in this process when not started by gorun")
	flag.IntVar(&cfg.epochs, "epochs", cfg.epochs, "epochs")
	flag.IntVar(&cfg.steps, "steps", cfg.steps, "steps per epoch")
	flag.IntVar(&cfg.batch, "batch", cfg.batch, "batch size per rank")
	hidden := flag.String("hidden", "64,64", "hidden layer widths")
	lr := flag.Float64("lr", float64(cfg.lr), "learning rate")
	compress := flag.String("compress", "none", "gradient compression on the wire: none, fp16, bf16")
	bucket := flag.Int("bucket-mb", 25, "bucket size in MiB")
	noOverlap := flag.Bool("no-overlap", false, "allreduce after the backward pass instead of during it")
	timeout := flag.Duration("timeout", 5*time.Minute, "give up after this long")
	flag.BoolVar(&cfg.elastic, "elastic", os.Getenv("GORUN_ELASTIC") == "1",
		"when a rank dies, shrink to the survivors and go on (default on under gorun --elastic)")
	out := flag.String("out", "", "write each rank's final parameters to DIR/rank-R.json (R: the rank gorun started)")
	flag.BoolVar(&cfg.regrow, "regrow", regrowByDefault(os.Getenv),
		"admit restarted and added ranks with Comm.Grow at step boundaries (default on under gorun --max-restarts or --max-np)")
	flag.IntVar(&cfg.waitNP, "wait-np", 0,
		"with regrow: when fewer than N ranks are left, wait at the next step for restarted ranks to rejoin instead of going on (Horovod Elastic's --min-np)")
	flag.DurationVar(&cfg.waitFor, "wait-timeout", cfg.waitFor, "with -wait-np: fail if no rank rejoins within this long")
	flag.IntVar(&cfg.uneven, "uneven", 0,
		"uneven inputs: rank r runs out r×N batches before each epoch's end and waits in the others' steps (ddp's Join)")
	flag.Parse()
	cfg.fresh = os.Getenv("GORUN_RESTART") != ""

	cfg.lr = float32(*lr)
	cfg.overlap = !*noOverlap
	cfg.ddp.BucketBytes = *bucket << 20
	cfg.dims = []int{16}
	for _, h := range strings.Split(*hidden, ",") {
		w, err := strconv.Atoi(strings.TrimSpace(h))
		if err != nil || w <= 0 {
			fatal(fmt.Errorf("bad -hidden %q", *hidden))
		}
		cfg.dims = append(cfg.dims, w)
	}
	cfg.dims = append(cfg.dims, 4)
	switch *compress {
	case "none":
	case "fp16":
		cfg.ddp.Compression = ddp.FP16
	case "bf16":
		cfg.ddp.Compression = ddp.BF16
	default:
		fatal(fmt.Errorf("bad -compress %q", *compress))
	}

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if comm.Launched() {
		c, err := comm.Init(ctx)
		if errors.Is(err, comm.ErrJobGone) {
			// Restarted after the others finished: they did the work.
			fmt.Fprintf(os.Stderr, "train: %v; the job ended before this rank was back, nothing to do\n", err)
			return
		}
		if err != nil {
			fatal(err)
		}
		rank := c.Rank()
		m, st, err := train(ctx, c, cfg, os.Stdout)
		if err == nil && *out != "" {
			err = writeResult(*out, rank, m, st)
		}
		// Close on failure too, before fatal's os.Exit (which runs no
		// defers): the peers hear that this rank left, and its timeline
		// (gorun --timeline) gets its last events.
		c.Close()
		if err != nil {
			fatal(err)
		}
		return
	}
	comms, err := comm.NewLocal(ctx, *np)
	if err != nil {
		fatal(err)
	}
	errs := make(chan error, len(comms))
	for _, c := range comms {
		go func() {
			m, st, err := train(ctx, c, cfg, os.Stdout)
			if err == nil && *out != "" {
				err = writeResult(*out, c.Rank(), m, st)
			}
			errs <- err
		}()
	}
	for range comms {
		if err := <-errs; err != nil {
			fatal(err)
		}
	}
	for _, c := range comms {
		c.Close()
	}
}

// result is what -out writes per rank.
type result struct {
	Rank       int                 // the rank gorun started
	FinalRank  int                 // after any shrinks
	FinalSize  int                 //
	Steps      int                 // the step reached (epochs*steps)
	Recoveries []resultRecovery    //
	Params     map[string][]uint32 // float32 bits, by parameter name
}

type resultRecovery struct {
	Step            int
	Dead            []int
	Size            int
	ShrinkMS        float64 // failure seen → Shrink returned
	FirstStepMS     float64 // failure seen → first step completed after Shrink
	SinceLastGoodMS float64 // last good step → failure seen (bounds the detection)
}

func writeResult(dir string, rank int, m *mlp, st stats) error {
	r := result{Rank: rank, FinalRank: st.rank, FinalSize: st.size, Steps: st.last, Params: map[string][]uint32{}}
	for _, rec := range st.recoveries {
		r.Recoveries = append(r.Recoveries, resultRecovery{Step: rec.step, Dead: rec.dead, Size: rec.size,
			ShrinkMS: ms(rec.shrink), FirstStepMS: ms(rec.firstStep), SinceLastGoodMS: ms(rec.sinceGood)})
	}
	for _, p := range m.params {
		bits := make([]uint32, len(p.Value))
		for i, v := range p.Value {
			bits[i] = math.Float32bits(v)
		}
		r.Params[p.Name] = bits
	}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	name := filepath.Join(dir, fmt.Sprintf("rank-%d.json", rank))
	tmp := name + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, name)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "train:", err)
	os.Exit(1)
}

// regrowByDefault says whether -regrow is on without the flag: under gorun
// --max-restarts (a failed rank comes back) or --max-np (gorun --add-ranks
// starts more), ranks wait in Init to be admitted with Grow, and a job
// that never calls Grow leaves them there until its end.
func regrowByDefault(getenv func(string) string) bool {
	return getenv("GORUN_MAX_RESTARTS") != "" || getenv("GORUN_MAX_NP") != ""
}
