package reliability

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorun-hpc/gorun/comm"
)

// The rank programs. Each reports events on stdout and exits 0 when it
// behaved as a rank should (finished, or failed with a named error), 3 on
// a wrong result, 2 on a setup problem.

var stdoutMu sync.Mutex

func emit(e event) {
	if e.T == 0 {
		e.T = time.Now().UnixNano()
	}
	b, _ := json.Marshal(e)
	stdoutMu.Lock()
	defer stdoutMu.Unlock()
	fmt.Fprintf(os.Stdout, "%s%s\n", eventPrefix, b)
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

// errRank is the rank a *comm.RankError names, or -2 when err is not one.
func errRank(err error) int {
	var re *comm.RankError
	if errors.As(err, &re) {
		return re.Rank
	}
	return -2
}

func runChild(role string) int {
	rank := envInt("GORUN_RANK", -1)
	switch role {
	case "coll":
		return childColl(rank)
	case "mismatch":
		return childMismatch(rank)
	case "echo":
		return childEcho()
	case "shrink":
		return childShrink(rank)
	case "recover":
		return childRecover(rank)
	case "grow":
		return childGrow(rank)
	}
	fmt.Fprintf(os.Stderr, "unknown role %q\n", role)
	return 2
}

// childColl runs REL_OP (allreduce, broadcast, barrier) REL_ITERS times
// (0: until an error) on REL_COUNT int32 elements, checking every result.
// After an error it closes the communicator, reports leaks and builds a new
// in-process communicator on the same transport.
func childColl(rank int) int {
	op := os.Getenv("REL_OP")
	iters := envInt("REL_ITERS", 0)
	count := envInt("REL_COUNT", 64)
	base := takeSnapshot()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := comm.Init(ctx)
	if err != nil {
		emit(event{Kind: "error", Rank: rank, Err: "init: " + err.Error(), ErrRank: errRank(err)})
		return after(rank, base, nil)
	}
	emit(event{Kind: "ready", Rank: rank})
	n := c.Size()
	buf := make([]int32, count)
	for it := 0; iters == 0 || it < iters; it++ {
		var err error
		switch op {
		case "allreduce":
			for i := range buf {
				buf[i] = int32(rank + 1 + i%7 + it)
			}
			err = comm.AllReduce(ctx, c, buf, buf, comm.Sum)
			if err == nil {
				for i, v := range buf {
					if want := int32(n*(n+1)/2 + n*(i%7+it)); v != want {
						emit(event{Kind: "wrong", Rank: rank, Iter: it, Err: fmt.Sprintf("allreduce [%d] = %d, want %d", i, v, want)})
						return 3
					}
				}
			}
		case "broadcast":
			root := it % n
			for i := range buf {
				buf[i] = 0
				if rank == root {
					buf[i] = int32(it*1000 + i)
				}
			}
			err = comm.Broadcast(ctx, c, buf, root)
			if err == nil {
				for i, v := range buf {
					if v != int32(it*1000+i) {
						emit(event{Kind: "wrong", Rank: rank, Iter: it, Err: fmt.Sprintf("broadcast [%d] = %d, want %d", i, v, it*1000+i)})
						return 3
					}
				}
			}
		case "barrier":
			err = c.Barrier(ctx)
		default:
			fmt.Fprintf(os.Stderr, "unknown REL_OP %q\n", op)
			return 2
		}
		if err != nil {
			emit(event{Kind: "error", Rank: rank, Iter: it, Err: err.Error(), ErrRank: errRank(err)})
			// Hold the communicator open a while (REL_HOLD_MS, default
			// 1000), as a program that logs before exiting would: a
			// survivor that closes at once can make its peers blame it.
			time.Sleep(time.Duration(envInt("REL_HOLD_MS", 1000)) * time.Millisecond)
			return after(rank, base, c)
		}
	}
	emit(event{Kind: "done", Rank: rank, Iter: iters})
	return after(rank, base, c)
}

// after closes c, reports what the process still holds beyond base, and
// whether a new communicator works.
func after(rank int, base snapshot, c *comm.Comm) int {
	if c != nil {
		closed := make(chan struct{})
		go func() {
			defer close(closed)
			c.Close()
		}()
		select {
		case <-closed:
		case <-time.After(10 * time.Second):
			// Close must not hang; report where it is stuck and stop.
			buf := make([]byte, 1<<16)
			buf = buf[:runtime.Stack(buf, true)]
			emit(event{Kind: "closehang", Rank: rank, Err: closeStack(string(buf))})
			return 4
		}
	}
	// memberlist stops its goroutines asynchronously after Shutdown; on a
	// loaded machine that takes seconds, so allow 10 s and report the wait.
	leak, waited := leaksSince(base, 10*time.Second)
	ev := event{Kind: "after", Rank: rank, Leak: leak, LeakWaitMS: waited.Milliseconds()}
	if os.Getenv("REL_REINIT") != "0" {
		ev.Reinit = reinit()
	}
	emit(ev)
	return 0
}

// closeStack picks the stuck Close's goroutine out of a full dump.
func closeStack(dump string) string {
	for _, g := range strings.Split(dump, "\n\n") {
		if strings.Contains(g, "(*Comm).Close") {
			return g
		}
	}
	return dump
}

// reinit builds a 2-rank in-process communicator and runs an allreduce on
// it; "" means it worked.
func reinit() string {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// Over tcp, whatever the job used: two shm ranks in one process trip
	// the race detector (see RELIABILITY.md), and tcp opens new sockets
	// and devices just as a fresh Init would.
	cs, err := comm.NewLocal(ctx, 2, comm.WithTransport("tcp"))
	if err != nil {
		return "NewLocal: " + err.Error()
	}
	defer func() {
		for _, c := range cs {
			c.Close()
		}
	}()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	out := make([][]float64, 2)
	for r, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[r] = []float64{float64(r + 1), 2}
			errs[r] = comm.AllReduce(ctx, c, out[r], out[r], comm.Sum)
		}()
	}
	wg.Wait()
	var msgs []string
	for r := range 2 {
		if errs[r] != nil {
			msgs = append(msgs, errs[r].Error())
		} else if out[r][0] != 3 || out[r][1] != 4 {
			msgs = append(msgs, fmt.Sprintf("rank %d got %v", r, out[r]))
		}
	}
	return strings.Join(msgs, "; ")
}
