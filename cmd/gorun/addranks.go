package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
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
	// As gorun's own (habits.go): -h prints the usage, a flag that does
	// not parse is one line, a hint if any, and a pointer to -h.
	fs := flag.NewFlagSet("gorun --add-ranks", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	n := fs.Int("add-ranks", 0, "start N more ranks in the running job --job (gorun --elastic --max-np); they join through Comm.Grow")
	job := fs.String("job", "", "the job's id (gorun prints it at start; ranks have it in GORUN_JOB_ID)")
	timeout := fs.Duration("timeout", 10*time.Second, "give up after this long")
	err := fs.Parse(args)
	if slices.ContainsFunc(args, func(a string) bool { return a == "-h" || a == "-help" || a == "--help" }) {
		err = flag.ErrHelp // gorun --add-ranks -h, where -h would be N
	}
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stderr, "usage: gorun --add-ranks N --job ID [--timeout D]\n\nFlags:\n")
			fs.SetOutput(stderr)
			fs.PrintDefaults()
			return 0
		}
		err = badFlag(err, args)
		var fe *flagError
		if errors.As(err, &fe) {
			fe.hint = "" // the hints are for a launch's flags (-np N for --ntasks): none fits here
			fe.help = "gorun --add-ranks"
		}
		fmt.Fprintln(stderr, "gorun:", err)
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
