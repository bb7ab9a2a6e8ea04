package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/gorun-hpc/gorun/launcher"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

// run is gorun's main, returning the exit status.
func run(args []string) int {
	if len(args) > 0 && args[0] == "trace" { // gorun trace (trace.go)
		return traceMain(args[1:], os.Stdout, os.Stderr)
	}
	if isAddRanks(args) { // gorun --add-ranks N --job ID (addranks.go)
		return addRanksMain(args, os.Stdout, os.Stderr)
	}
	cfg, err := parseArgs(args, os.Stdout, os.Stderr)
	if err != nil {
		if isHelp(err) {
			return 0
		}
		fmt.Fprintln(os.Stderr, "gorun:", err)
		return launcher.StatusUsage
	}
	sigs := make(chan os.Signal, 4)
	// SIGQUIT (Ctrl-\ on a terminal) too: forwarded as itself, so that a Go rank
	// prints every goroutine's stack before it exits (a hung job's best
	// clue), as MPICH's mpiexec (Hydra) forwards it; gorun cleans up and exits 131
	// instead of dying at once with its build left behind.
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2)
	// SIGHUP (the terminal went away) stops the job as SIGTERM does, as
	// mpirun's; under nohup it stays ignored (Notify would undo that).
	if !signal.Ignored(syscall.SIGHUP) {
		signal.Notify(sigs, syscall.SIGHUP)
	}
	// When whatever reads gorun's output goes away (gorun ... | head),
	// gorun stops the job, as a pipeline's writer would, but cleans up
	// first, instead of dying of SIGPIPE. Notified, SIGPIPE comes for a
	// write to any descriptor (a rank's stdin pipe, say), so only a broken
	// stdout or stderr stops the job.
	pipes := make(chan os.Signal, 1)
	signal.Notify(pipes, syscall.SIGPIPE)
	defer signal.Stop(pipes)
	go func() {
		for range pipes {
			if stdioBroken() {
				select {
				case sigs <- syscall.SIGPIPE:
				default:
				}
				return
			}
		}
	}()
	defer signal.Stop(sigs)
	cfg.Signals = sigs
	// Rank 0 reads gorun's stdin through a pipe gorun fills, so a rank in
	// its own process group never reads the terminal itself.
	if forwardStdin(os.Stdin) {
		cfg.Stdin = struct{ io.Reader }{os.Stdin}
	}
	cfg.Terminal = isTerminal(os.Stderr)
	err = launcher.Run(context.Background(), cfg)
	var re *launcher.RankError
	var je *launcher.JobError
	if err != nil && !errors.As(err, &re) && !errors.As(err, &je) {
		fmt.Fprintln(os.Stderr, "gorun:", err) // the runner printed the others as they happened
	}
	return launcher.ExitStatus(err)
}
