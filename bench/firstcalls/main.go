// Command firstcalls times each of a job's first small allreduces, one by
// one, after Init and a pause: the calls a benchmark's warm-up hides
// (README, "A job's first calls"). Each rank prints its calls' times in
// microseconds, in order.
//
//	go build -o /tmp/firstcalls ./bench/firstcalls
//	go run ./cmd/gorun -np 2 /tmp/firstcalls
//
// bench/compare/progs/firstcalls.c is the same loop for an MPI library.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/gorun-hpc/gorun/comm"
)

func main() {
	calls := flag.Int("n", 20, "allreduces to time, one 8-byte float64 each")
	pause := flag.Duration("pause", 2*time.Second, "sleep between Init and the first call")
	flag.Parse()
	if !comm.Launched() {
		log.Fatal("firstcalls times launched ranks: run it under gorun (or mpirun, srun)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := comm.Init(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	time.Sleep(*pause)
	v := make([]float64, 1)
	took := make([]string, *calls)
	for i := range took {
		start := time.Now()
		if err := comm.AllReduce(ctx, c, v, v, comm.Sum); err != nil {
			log.Fatal(err)
		}
		took[i] = fmt.Sprint(time.Since(start).Microseconds())
	}
	fmt.Printf("rank %d us: %s\n", c.Rank(), strings.Join(took, " "))
	if err := c.Barrier(ctx); err != nil {
		log.Fatal(err)
	}
}
