// Command timeline is the rank program of the launcher's timeline and
// report tests: a fixed sequence of collectives, a user span, and on
// request a skewed clock (rank TL_SKEW_RANK re-runs itself in a time
// namespace whose CLOCK_MONOTONIC is TL_SKEW seconds ahead) and a
// straggler (rank TL_SLEEP_RANK sleeps TL_SLEEP before each allreduce);
// with TL_DIE_RANK that rank exits after the barrier and the others
// shrink and run one more allreduce; with TL_HOLD it waits for that file
// to exist before it leaves; with TL_CRASH_RANK every rank waits, after
// the barrier, until every rank's timeline file holds its barrier (the
// periodic flush), then that rank exits 3 without closing and the others
// wait for gorun's SIGTERM; with TL_FAIL_RANK that rank's run returns an
// error after the barrier (closing its communicator) and it exits 1 only
// TL_FAIL_DELAY later, as an interpreter tearing down, while the others'
// allreduces fail because it left.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/gorun-hpc/gorun/comm"
)

func main() {
	rank := os.Getenv("GORUN_RANK")
	if skew := os.Getenv("TL_SKEW"); skew != "" && rank == os.Getenv("TL_SKEW_RANK") && os.Getenv("TL_IN_NS") == "" {
		os.Exit(reexecSkewed(skew))
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "timeline:", err)
		if errors.Is(err, errFail) {
			d, _ := time.ParseDuration(os.Getenv("TL_FAIL_DELAY"))
			time.Sleep(d) // a slow exit, after the Close
		}
		os.Exit(1)
	}
}

// reexecSkewed runs this program again in a new time namespace.
func reexecSkewed(skew string) int {
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "timeline:", err)
		return 1
	}
	cmd := exec.Command("unshare", append([]string{"--time", "--monotonic", skew, "--fork", "--", self}, os.Args[1:]...)...)
	cmd.Env = append(os.Environ(), "TL_IN_NS=1")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		fmt.Fprintln(os.Stderr, "timeline:", err)
		return 1
	}
	return 0
}

var errFail = errors.New("TL_FAIL_RANK: this rank fails")

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := comm.Init(ctx)
	if err != nil {
		return fmt.Errorf("init: %w", err)
	}
	defer c.Close()
	var sleep time.Duration
	if strconv.Itoa(c.Rank()) == os.Getenv("TL_SLEEP_RANK") {
		if sleep, err = time.ParseDuration(os.Getenv("TL_SLEEP")); err != nil {
			return err
		}
	}
	v := make([]float32, 8)
	for range 10 {
		sp := c.StartSpan("compute", "compute", 0)
		time.Sleep(sleep)
		sp.End()
		if err := comm.AllReduce(ctx, c, v, v, comm.Sum); err != nil {
			return err
		}
	}
	if err := comm.Broadcast(ctx, c, v, 0); err != nil {
		return err
	}
	die := os.Getenv("TL_DIE_RANK")
	// The rank that dies leaves as soon as its barrier is done, and a
	// survivor may learn of its death before it has consumed that rank's
	// barrier message: its barrier then fails (the peer failed), as ULFM
	// allows, and it goes on to the shrink like the others.
	if err := c.Barrier(ctx); err != nil && (die == "" || !errors.Is(err, comm.ErrPeerFailed)) {
		return err
	} else if err != nil {
		fmt.Printf("rank %d: barrier: %v\n", c.Rank(), err)
	}
	if fail := os.Getenv("TL_FAIL_RANK"); fail != "" {
		if strconv.Itoa(c.Rank()) == fail {
			return errFail
		}
		for {
			if err := comm.AllReduce(ctx, c, v, v, comm.Sum); err != nil {
				return err
			}
		}
	}
	if crash := os.Getenv("TL_CRASH_RANK"); crash != "" {
		waitFlushed(os.Getenv("GORUN_TIMELINE"), c.Size())
		if strconv.Itoa(c.Rank()) == crash {
			fmt.Printf("rank %d: crashing\n", c.Rank())
			os.Exit(3)
		}
		time.Sleep(60 * time.Second) // until gorun's SIGTERM
		return errors.New("not stopped by gorun")
	}
	if die != "" {
		if strconv.Itoa(c.Rank()) == die {
			fmt.Printf("rank %d: leaving\n", c.Rank())
			os.Exit(3)
		}
		// The survivors shrink (gorun --elastic), reconnecting to each
		// other, and go on.
		for {
			if err := comm.AllReduce(ctx, c, v, v, comm.Sum); err != nil {
				break
			}
		}
		s, err := c.Shrink(ctx)
		if err != nil {
			return fmt.Errorf("shrink: %w", err)
		}
		defer s.Close()
		if err := comm.AllReduce(ctx, s, v, v, comm.Sum); err != nil {
			return fmt.Errorf("allreduce after shrink: %w", err)
		}
	}
	if hold := os.Getenv("TL_HOLD"); hold != "" {
		// Stay in the job (for a scrape of its metrics) until hold exists.
		fmt.Printf("rank %d: holding\n", c.Rank())
		for end := time.Now().Add(60 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
			if _, err := os.Stat(hold); err == nil {
				break
			}
		}
	}
	fmt.Printf("rank %d: done\n", c.Rank())
	return nil
}

// waitFlushed waits (at most 30 s) until the timeline file of every rank
// holds its barrier.
func waitFlushed(base string, size int) {
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		n := 0
		for r := range size {
			if b, err := os.ReadFile(base + "." + strconv.Itoa(r)); err == nil && strings.Contains(string(b), `"name":"barrier"`) {
				n++
			}
		}
		if n == size {
			return
		}
	}
}
