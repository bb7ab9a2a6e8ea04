package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/gorun-hpc/gorun/launcher"
)

// isAddRanks says whether args ask for gorun --add-ranks (a request to a
// running job, not a launch).
func isAddRanks(args []string) bool {
	for _, a := range args {
		if a == "--" || !strings.HasPrefix(a, "-") {
			return false // the program and its arguments start here
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if name == "add-ranks" {
			return true
		}
	}
	return false
}

// addRanksMain is gorun --add-ranks N --job ID: it asks the gorun running
// job ID on this machine (--elastic --max-np) to start N more ranks.
func addRanksMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gorun --add-ranks", flag.ContinueOnError)
	fs.SetOutput(stderr)
	n := fs.Int("add-ranks", 0, "start N more ranks in the running job --job (gorun --elastic --max-np); they join through Comm.Grow")
	job := fs.String("job", "", "the job's id (gorun prints it at start; ranks have it in GORUN_JOB_ID)")
	timeout := fs.Duration("timeout", 10*time.Second, "give up after this long")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return launcher.StatusUsage
	}
	if *n < 1 || *job == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "gorun: usage: gorun --add-ranks N --job ID (N ≥ 1; no program)")
		return launcher.StatusUsage
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	ranks, err := launcher.AddRanks(ctx, *job, *n)
	if err != nil {
		fmt.Fprintln(stderr, "gorun:", err)
		return 1
	}
	s := make([]string, len(ranks))
	for i, r := range ranks {
		s[i] = fmt.Sprint(r)
	}
	fmt.Fprintf(stdout, "gorun: job %s: started rank(s) %s\n", *job, strings.Join(s, ", "))
	return 0
}
