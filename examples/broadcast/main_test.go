package main

import (
	"context"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/comm"
)

func TestRun(t *testing.T) {
	for _, n := range []int{1, 3, 4} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		comms, err := comm.NewLocal(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		errs := make(chan error, n)
		for _, c := range comms {
			go func() { errs <- run(ctx, c) }()
		}
		for range comms {
			if err := <-errs; err != nil {
				t.Error(err)
			}
		}
		for _, c := range comms {
			c.Close()
		}
		cancel()
	}
}
