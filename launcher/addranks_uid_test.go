//go:build linux

package launcher

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/internal/testuser"
)

// A client of another uid (the test user, internal/testuser) that connects
// to a job's add-ranks socket is refused: the job starts nothing for it.
// The same client run as the job's own user is served, so the test can
// tell the two apart.
func TestAddRanksRefusesOtherUID(t *testing.T) {
	cred := testuser.Credential(t)
	py, err := exec.LookPath("/usr/bin/python3")
	if err != nil {
		t.Skip("no python3 for the foreign client")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	jobID := "uid-test-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	reqs := make(chan addRequest)
	stop, err := serveAddRanks(ctx, jobID, reqs)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	client := `import socket,sys
s=socket.socket(socket.AF_UNIX,socket.SOCK_STREAM)
s.connect("\0"+sys.argv[1][1:]); s.settimeout(10)
try: s.sendall(b"add 1\n")
except OSError: pass # refused: the answer came first, and the hang-up
print(s.makefile().readline().strip())`
	run := func(asOther bool) <-chan string {
		out := make(chan string, 1)
		cmd := exec.CommandContext(ctx, py, "-c", client, controlSocket(jobID))
		if asOther {
			cmd.SysProcAttr = cred
		}
		go func() {
			b, err := cmd.CombinedOutput()
			if err != nil {
				b = append(b, err.Error()...)
			}
			out <- strings.TrimSpace(string(b))
		}()
		return out
	}

	out := run(true)
	select {
	case req := <-reqs:
		req.reply <- addReply{ranks: []int{4}}
		t.Fatalf("a request from uid %d reached the job (add %d)", cred.Credential.Uid, req.n)
	case o := <-out:
		if o != "error refused: not the job's user" {
			t.Fatalf("client of uid %d: %q", cred.Credential.Uid, o)
		}
	}

	out = run(false)
	select {
	case req := <-reqs:
		if req.n != 1 {
			t.Errorf("own user's request: add %d, want 1", req.n)
		}
		req.reply <- addReply{ranks: []int{4}}
	case o := <-out:
		t.Fatalf("the job's own user was not served: %q", o)
	}
	if o := <-out; o != "ok 4" {
		t.Fatalf("own user's client: %q", o)
	}
}
