// Command sigloop is the rank program of gorun's signal tests: each rank
// joins the job, starts a helper process in its own process group that
// ignores SIGINT and SIGTERM (as a rank's data loader or a wrapped tool
// may), prints its and the helper's pid, and allreduces until it is
// stopped. With SIGLOOP_IGNORE=1 the rank ignores SIGINT and SIGTERM too,
// so that only SIGKILL ends it; with SIGLOOP_CHATTY=1 it prints a line
// every 10 ms.
package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/gorun-hpc/gorun/comm"
)

func main() {
	if os.Getenv("SIGLOOP_HELPER") != "" {
		signal.Ignore(syscall.SIGINT, syscall.SIGTERM)
		fmt.Println("ignoring")
		time.Sleep(2 * time.Minute) // the test ends it, or reports it left behind
		return
	}
	if os.Getenv("SIGLOOP_IGNORE") != "" {
		signal.Ignore(syscall.SIGINT, syscall.SIGTERM)
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "sigloop:", err)
		os.Exit(1)
	}
}

func run() error {
	ictx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	c, err := comm.Init(ictx)
	cancel()
	if err != nil {
		return fmt.Errorf("init: %w", err)
	}
	defer c.Close()
	helper := exec.Command(os.Args[0])
	helper.Env = append(os.Environ(), "SIGLOOP_HELPER=1")
	out, err := helper.StdoutPipe()
	if err != nil {
		return err
	}
	if err := helper.Start(); err != nil {
		return fmt.Errorf("helper: %w", err)
	}
	// The helper ignores the signals before the test may send one.
	if line, err := bufio.NewReader(out).ReadString('\n'); line != "ignoring\n" {
		return fmt.Errorf("helper said %q (%v)", line, err)
	}
	ctx := context.Background()
	buf := make([]float64, 4096)
	if err := comm.AllReduce(ctx, c, buf, buf, comm.Sum); err != nil {
		return fmt.Errorf("allreduce: %w", err)
	}
	fmt.Printf("sigloop: pid %d helper %d\n", os.Getpid(), helper.Process.Pid)
	chatty, last := os.Getenv("SIGLOOP_CHATTY") != "", time.Now()
	for n := 0; ; n++ {
		if err := comm.AllReduce(ctx, c, buf, buf, comm.Sum); err != nil {
			return fmt.Errorf("allreduce: %w", err)
		}
		if chatty && time.Since(last) > 10*time.Millisecond {
			fmt.Printf("sigloop: allreduce %d\n", n)
			last = time.Now()
		}
	}
}
