// Command train is data-parallel training of a small multilayer perceptron
// in plain Go on gorun: each rank trains on its shard of a synthetic
// classification set and gradients are averaged across ranks in fused
// buckets while the backward pass runs.
//
//	gorun -np 4 ./examples/train          # one process per rank
//	go run ./examples/train -np 4         # four ranks in one process
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gorun-hpc/gorun/comm"
	"github.com/gorun-hpc/gorun/ddp"
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
	flag.Parse()

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
	if launched() {
		c, err := comm.Init(ctx)
		if err != nil {
			fatal(err)
		}
		defer c.Close()
		if _, _, err := train(ctx, c, cfg, os.Stdout); err != nil {
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
			_, _, err := train(ctx, c, cfg, os.Stdout)
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

// launched reports whether a launcher (gorun, srun, mpirun, torchrun) started us.
func launched() bool {
	for _, v := range []string{"GORUN_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "WORLD_SIZE"} {
		if os.Getenv(v) != "" {
			return true
		}
	}
	return false
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "train:", err)
	os.Exit(1)
}
