package launcher

import (
	"context"
	"os"
	"syscall"
)

// startWatch reads Config.Signals until the runner takes them over, so
// that SIGINT or SIGTERM ends what comes before the ranks start (a go
// build, the --nnodes check-in at the seed) at once, as mpirun's Ctrl-C
// does, instead of after it. Its goroutine owns the channel until handOff
// returns; the runner owns it after.
type startWatch struct {
	cancel context.CancelCauseFunc
	stop   chan struct{} // closed by handOff
	exited chan struct{} // closed when the goroutine no longer reads
	sig    *JobError     // the interruption, written before exited closes
}

// watchStart returns a context that a stopping signal on sigs cancels
// until handOff.
func watchStart(ctx context.Context, sigs <-chan os.Signal) (context.Context, *startWatch) {
	ctx, cancel := context.WithCancelCause(ctx)
	w := &startWatch{cancel: cancel, stop: make(chan struct{}), exited: make(chan struct{})}
	go func() {
		defer close(w.exited)
		for {
			select {
			case <-w.stop:
				return
			case sig := <-sigs:
				s, _ := sig.(syscall.Signal)
				if s == 0 {
					s = syscall.SIGTERM
				}
				if !stops(s) {
					continue // SIGUSR1, SIGUSR2: no rank to pass them on to yet
				}
				w.sig = &JobError{Err: ErrInterrupted, Detail: " by " + s.String(), Status: 128 + int(s)}
				cancel(w.sig)
				return
			}
		}
	}()
	return ctx, w
}

// handOff stops the watch before the runner reads the signals itself; it
// returns the interruption if a stopping signal came, and then no rank
// may start.
func (w *startWatch) handOff() *JobError {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.exited
	return w.sig
}

// interrupted is Run's error when a signal ended the job before any rank
// started, else err.
func (w *startWatch) interrupted(err error, con *console) error {
	if je := w.handOff(); je != nil {
		con.message("gorun: " + je.Error() + " before any rank started")
		return je
	}
	return err
}
