package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/gorun-hpc/gorun/internal/trace"
	"github.com/gorun-hpc/gorun/launcher"
)

// traceMain is "gorun trace": it draws a merged timeline as an SVG Gantt
// chart, or merges and reports the per-rank files of a job that another
// launcher started (GORUN_TIMELINE=BASE under srun, mpirun, torchrun).
//
//	gorun trace timeline.json -o timeline.svg [-from US -to US]
//	gorun trace -merge BASE [-o timeline.json] [-report]
func traceMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gorun trace", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("o", "", "output: the SVG (or with -merge the merged JSON)")
	merge := fs.String("merge", "", "merge the per-rank files BASE.0, BASE.1, ..., restarted ranks' BASE.R.restartN and a process's later communicators' BASE.R.initN (GORUN_TIMELINE=BASE)")
	report := fs.Bool("report", false, "with -merge: print the job report")
	from := fs.Float64("from", 0, "draw from this time, µs from the start")
	to := fs.Float64("to", 0, "draw up to this time, µs from the start (0: the end)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: gorun trace TIMELINE.json -o timeline.svg [-from US -to US]\n"+
			"       gorun trace -merge BASE [-o timeline.json] [-report]\n\n")
		fs.PrintDefaults()
	}
	// Flags may follow the file name.
	var files []string
	for rest := args; ; {
		if err := fs.Parse(rest); err != nil {
			if err == flag.ErrHelp {
				return 0
			}
			return launcher.StatusUsage
		}
		if fs.NArg() == 0 {
			break
		}
		files = append(files, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	if *merge != "" {
		if len(files) > 0 {
			fmt.Fprintln(stderr, "gorun trace: -merge takes no file argument")
			return launcher.StatusUsage
		}
		rfs, missing, err := trace.ReadRanks(*merge, 0)
		if err != nil {
			fmt.Fprintln(stderr, "gorun trace:", err)
			return 1
		}
		if len(missing) > 0 {
			fmt.Fprintf(stderr, "gorun trace: no events from ranks %v (no file, or an empty one)\n", missing)
		}
		if *out != "" {
			f, err := os.Create(*out)
			if err == nil {
				err = trace.Merge(f, rfs)
				if cerr := f.Close(); err == nil {
					err = cerr
				}
			}
			if err != nil {
				fmt.Fprintln(stderr, "gorun trace:", err)
				return 1
			}
		}
		if *report || *out == "" {
			fmt.Fprint(stdout, trace.Summarize(rfs).String())
		}
		return 0
	}
	if len(files) != 1 || *out == "" || !strings.HasSuffix(*out, ".svg") {
		fs.Usage()
		return launcher.StatusUsage
	}
	f, err := os.Open(files[0])
	if err != nil {
		fmt.Fprintln(stderr, "gorun trace:", err)
		return 1
	}
	t, err := trace.ReadChrome(f)
	f.Close()
	if err == nil {
		var w *os.File
		if w, err = os.Create(*out); err == nil {
			err = trace.SVG(w, t, *from, *to)
			if cerr := w.Close(); err == nil {
				err = cerr
			}
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "gorun trace: %s: %v\n", files[0], err)
		return 1
	}
	return 0
}
