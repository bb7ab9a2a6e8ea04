// Command straggler is the launcher's stall-report rank program: every
// rank allreduces a few times, then rank 2 stops (a straggler) while the
// others enter the next allreduce and wait for it.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/gorun-hpc/gorun/comm"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := comm.Init(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "init:", err)
		os.Exit(1)
	}
	defer c.Close()
	buf := make([]float32, 1024)
	for i := 0; i < 3; i++ {
		if err := comm.AllReduce(ctx, c, buf, buf, comm.Sum); err != nil {
			fmt.Fprintln(os.Stderr, "allreduce:", err)
			os.Exit(1)
		}
	}
	fmt.Println("did 3 allreduces")
	if c.Rank() == 2 {
		time.Sleep(time.Minute) // gorun stops the job long before
	}
	comm.AllReduce(ctx, c, buf, buf, comm.Sum)
}
