// Command initexit is a rank of TestInitExitNotice: the rank named by
// GORUN_TEST_EXIT exits at once with status 3, before it calls Init; the
// others call comm.Init and print its outcome.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/gorun-hpc/gorun/comm"
)

func main() {
	if os.Getenv("GORUN_RANK") == os.Getenv("GORUN_TEST_EXIT") {
		os.Exit(3)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	c, err := comm.Init(ctx)
	if err != nil {
		fmt.Printf("INIT ERROR: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("INIT OK rank %d of %d\n", c.Rank(), c.Size())
	c.Close()
}
