package comm

import (
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

// initDiesEnv names the rank that TestInitAgreeChild kills once it has
// acknowledged the world (initHook "formed").
const initDiesEnv = "GORUN_INIT_TEST_DIES"

// TestInitAgreeChild is one rank of TestInitRankDiesAfterForm: its Init's
// outcome, one line.
func TestInitAgreeChild(t *testing.T) {
	dies := os.Getenv(initDiesEnv)
	if dies == "" {
		t.Skip("run by TestInitRankDiesAfterForm")
	}
	if dies == os.Getenv("GORUN_RANK") {
		initHook = func(step string) {
			if step == "formed" {
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {} // the signal is on its way
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := Init(ctx)
	if err != nil {
		var re *RankError
		if errors.As(err, &re) {
			fmt.Printf("INIT FAILED culprit=%d: %v\n", re.Rank, err)
		} else {
			fmt.Printf("INIT FAILED: %v\n", err)
		}
		return
	}
	fmt.Printf("INIT OK rank %d\n", c.Rank())
	c.Close()
}

// TestInitRankDiesAfterForm: of 6 ranks, rank 2 dies once it has
// acknowledged the world, before it connects. Rank 5 has no start-up
// link to rank 2 (collectives.InitPeers), so before Init ended with an
// agreement its Init returned a communicator; now every survivor's Init
// fails naming rank 2.
func TestInitRankDiesAfterForm(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 6 processes")
	}
	const n, dies = 6, 2
	seed := "127.0.0.1:" + strconv.Itoa(initFreePort(t))
	common := append(initCleanEnv(), initDiesEnv+"="+strconv.Itoa(dies), "GORUN_SIZE="+strconv.Itoa(n), "GORUN_SEEDS="+seed,
		"GORUN_JOB_ID=agree-test-"+initRandomID(), "GORUN_JOB_TOKEN="+initRandomID(), "GORUN_TIMEOUT=60s")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmds, stdins, outs := startStdinRanks(t, ctx, n, common, "TestInitAgreeChild")
	for _, w := range stdins {
		w.Close()
	}
	for r, cmd := range cmds {
		err := cmd.Wait()
		out := outs[r].String()
		if r == dies {
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Errorf("rank %d was to die by SIGKILL: %v\n%s", r, err, out)
			}
			continue
		}
		if !strings.Contains(out, fmt.Sprintf("INIT FAILED culprit=%d", dies)) {
			t.Errorf("rank %d: Init did not fail naming rank %d:\n%s", r, dies, out)
		}
	}
}
