// Command broadcast is the smallest gorun program: rank 0 broadcasts a
// vector, every rank adds its rank to it, and an allreduce sums the result.
//
//	gorun -np 4 ./examples/broadcast
//	go run ./examples/broadcast          # 4 ranks in one process
package main

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/gorun-hpc/gorun/comm"
)

func run(ctx context.Context, c *comm.Comm) error {
	v := make([]float32, 4)
	if c.Rank() == 0 {
		v = []float32{1, 2, 3, 4}
	}
	if err := comm.Broadcast(ctx, c, v, 0); err != nil { // every rank now has 1 2 3 4
		return err
	}
	for i := range v {
		v[i] += float32(c.Rank())
	}
	if err := comm.AllReduce(ctx, c, v, v, comm.Sum); err != nil { // in place
		return err
	}
	n, sumRanks := float32(c.Size()), float32(c.Size()*(c.Size()-1)/2)
	for i, x := range v {
		if want := n*float32(i+1) + sumRanks; x != want {
			return fmt.Errorf("rank %d: v[%d] = %v, want %v", c.Rank(), i, x, want)
		}
	}
	if c.Rank() == 0 {
		fmt.Printf("%d ranks: %v\n", c.Size(), v)
	}
	return nil
}

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if comm.Launched() { // gorun, srun, mpirun (Open MPI or MPICH) or torchrun
		c, err := comm.Init(ctx)
		if err != nil {
			log.Fatal(err)
		}
		defer c.Close()
		if err := run(ctx, c); err != nil {
			log.Fatal(err)
		}
		if err := c.Barrier(ctx); err != nil {
			log.Fatal(err)
		}
		return
	}
	comms, err := comm.NewLocal(ctx, 4) // four ranks in this process
	if err != nil {
		log.Fatal(err)
	}
	errs := make(chan error, len(comms))
	for _, c := range comms {
		go func() { errs <- run(ctx, c) }()
	}
	for range comms {
		if err := <-errs; err != nil {
			log.Fatal(err)
		}
	}
	for _, c := range comms {
		c.Close()
	}
}
