package comm

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// reinitSlowEnv names the rank of TestReinitChild that does not close its
// first communicator and dies while the others call Init again.
const reinitSlowEnv = "GORUN_REINIT_TEST_SLOW"

// TestReinitChild is one rank of TestInitAgainRankDies: Init, Close, Init
// again, its outcomes one line each.
func TestReinitChild(t *testing.T) {
	slow := os.Getenv(reinitSlowEnv)
	if slow == "" {
		t.Skip("run by TestInitAgainRankDies")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute) // beyond GORUN_TIMEOUT
	defer cancel()
	c, err := Init(ctx)
	if err != nil {
		fmt.Printf("INIT1 FAILED: %v\n", err)
		return
	}
	fmt.Printf("INIT1 OK rank %d\n", c.Rank())
	if strconv.Itoa(c.Rank()) == slow {
		// Not closed: its formed node finds no member at the seed address
		// once the others closed theirs, and joins the seed again (about
		// a second later: bootstrap's keepSeeds), which is then the
		// others' new rank 0. It dies when the test says (stdin).
		line, _ := bufio.NewReader(os.Stdin).ReadString('\n')
		if line != "die\n" {
			fmt.Printf("NOT TOLD TO DIE: %q\n", line)
			return
		}
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
	if err := c.Close(); err != nil {
		fmt.Printf("CLOSE FAILED: %v\n", err)
	}
	fmt.Println("INIT2 START")
	start := time.Now()
	c, err = Init(ctx)
	took := time.Since(start).Round(time.Millisecond)
	if err != nil {
		var re *RankError
		if errors.As(err, &re) {
			fmt.Printf("INIT2 FAILED culprit=%d after %v: %v\n", re.Rank, took, err)
		} else {
			fmt.Printf("INIT2 FAILED after %v: %v\n", took, err)
		}
		return
	}
	fmt.Printf("INIT2 OK rank %d\n", c.Rank())
	c.Close()
}

// A finalize and init again in one job (torch's destroy_process_group then
// init_process_group), rank 2 slow to finalize: its first communicator's
// gossip node, formed, is still open while the others' new nodes form, and
// its push/pull state reaches them. Then it dies (SIGKILL). The others' second Init
// must fail naming rank 2, as a first Init does, not at GORUN_TIMEOUT
// (60 s): before, that state told them the job ran, and a node told so
// waits out deaths while it forms (for a Grow, as a restarted rank does).
func TestInitAgainRankDies(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 3 processes")
	}
	const n, slow = 3, 2
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	seed := "127.0.0.1:" + strconv.Itoa(initFreePort(t))
	common := append(initCleanEnv(), reinitSlowEnv+"="+strconv.Itoa(slow), "GORUN_SIZE="+strconv.Itoa(n),
		"GORUN_SEEDS="+seed, "GORUN_JOB_ID=reinit-test-"+initRandomID(), "GORUN_JOB_TOKEN="+initRandomID(), "GORUN_TIMEOUT=60s")
	cmds, stdins, outs := startStdinRanks(t, ctx, n, common, "TestReinitChild")
	for r, w := range stdins {
		if r != slow {
			w.Close()
		}
	}
	// Rank 2 dies once the others' second Init has run for a while: its
	// old node joins their new seed about a second after the old seed
	// left. Dying sooner, before they knew of it, failed this test at
	// their timeout too, not a pass.
	for r := range n {
		for r != slow && !strings.Contains(outs[r].String(), "INIT2 START") {
			if ctx.Err() != nil {
				t.Fatalf("rank %d never started its second Init:\n%s", r, outs[r].String())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	time.Sleep(5 * time.Second)
	fmt.Fprintln(stdins[slow], "die")
	stdins[slow].Close()
	for r, cmd := range cmds {
		err := cmd.Wait()
		out := outs[r].String()
		if r == slow {
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Errorf("rank %d was to die by SIGKILL: %v\n%s", r, err, out)
			}
			continue
		}
		line := ""
		for l := range strings.Lines(out) {
			if strings.HasPrefix(l, "INIT2 ") {
				line = strings.TrimSpace(l)
			}
		}
		var took time.Duration
		if _, after, ok := strings.Cut(line, " after "); ok {
			d, _, _ := strings.Cut(after, ": ")
			took, _ = time.ParseDuration(d)
		}
		switch {
		case !strings.HasPrefix(line, fmt.Sprintf("INIT2 FAILED culprit=%d ", slow)):
			t.Errorf("rank %d: second Init did not fail naming rank %d:\n%s", r, slow, out)
		case took <= 0 || took > 20*time.Second: // rank 2 dies after 5 s; GORUN_TIMEOUT is 60 s
			t.Errorf("rank %d: second Init failed at its timeout, not at rank %d's death: %s", r, slow, line)
		default:
			t.Logf("rank %d: %s", r, line)
		}
	}
}
