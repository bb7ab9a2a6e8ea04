//go:build linux

package shm

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/internal/testuser"
	"github.com/gorun-hpc/gorun/transport/rdma"
)

// A process of another uid that connects to the abstract socket (which has
// no permissions to stop it) is refused by the SO_PEERCRED check, with no
// token configured as with one. Needs root to run the client as the test
// user (internal/testuser).
func TestOtherUIDRefused(t *testing.T) {
	cred := testuser.Credential(t)
	uid := strconv.Itoa(int(cred.Credential.Uid))
	py, err := exec.LookPath("/usr/bin/python3") // not a per-user shim: it runs as nobody
	if err != nil {
		t.Skip("no python3 for the foreign client")
	}
	for _, token := range []string{"", "s3cret"} {
		t.Run("token="+token, func(t *testing.T) {
			_, ln := listenOne(t, rdma.Config{Token: []byte(token)})
			addr := ln.Addr().String()
			// The client sends a well-formed hello (magic, version, no
			// auth flag), if the listener has not hung up already, and
			// waits for it to hang up.
			script := `import socket,struct,sys
s=socket.socket(socket.AF_UNIX,socket.SOCK_STREAM)
s.connect("\0"+sys.argv[1][1:])
s.settimeout(10)
try:
    s.sendall(struct.pack("<QII",int(sys.argv[2]),int(sys.argv[3]),0)+b"\0"*32)
    while True:
        d,anc,_,_=s.recvmsg(4096,socket.CMSG_SPACE(64))
        if anc: print("GOT FDS")
        if not d: break
except Exception: pass
print("closed")`
			cmd := exec.Command(py, "-c", script, addr, strconv.FormatUint(segMagic, 10), strconv.Itoa(segVersion))
			cmd.SysProcAttr = cred
			out := make(chan string, 1)
			go func() {
				b, err := cmd.CombinedOutput()
				if err != nil {
					out <- string(b) + err.Error()
					return
				}
				out <- string(b)
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, err := ln.Accept(ctx)
			if err == nil {
				c.Close()
				t.Fatalf("a connection from uid %s was accepted", uid)
			}
			if !errors.Is(err, rdma.ErrAuth) || !strings.Contains(err.Error(), "uid "+uid) {
				t.Fatalf("Accept: %v, want ErrAuth naming uid %s", err, uid)
			}
			if o := <-out; !strings.Contains(o, "closed") || strings.Contains(o, "GOT FDS") {
				t.Fatalf("client: %s", o)
			}
		})
	}
}

// A listener of another uid (squatting a name a rank dials) is refused by
// the dialer's SO_PEERCRED check before anything of the job is sent: no
// memfd reaches it.
func TestOtherUIDListenerRefused(t *testing.T) {
	cred := testuser.Credential(t)
	uid := strconv.Itoa(int(cred.Credential.Uid))
	py, err := exec.LookPath("/usr/bin/python3")
	if err != nil {
		t.Skip("no python3 for the foreign listener")
	}
	script := `import socket,sys
l=socket.socket(socket.AF_UNIX,socket.SOCK_STREAM)
l.bind("\0"+sys.argv[1]); l.listen(1); print("READY",flush=True)
l.settimeout(10)
s,_=l.accept(); s.settimeout(10)
try:
    while True:
        d,anc,_,_=s.recvmsg(4096,socket.CMSG_SPACE(64))
        if anc: print("GOT FDS")
        if not d: break
except Exception as e: print(e)
print("closed")`
	name := "gorun-test-impostor-" + strconv.Itoa(os.Getpid())
	cmd := exec.Command(py, "-c", script, name)
	cmd.SysProcAttr = cred
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	rd := bufio.NewReader(stdout)
	if line, err := rd.ReadString('\n'); err != nil || !strings.HasPrefix(line, "READY") {
		t.Fatalf("foreign listener: %q %v", line, err)
	}
	dev, err := rdma.OpenConfig("shm", rdma.Config{Token: []byte("s3cret")})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := dev.Dial(ctx, "@"+name)
	if err == nil {
		c.Close()
		t.Fatalf("dialed a listener of uid %s", uid)
	}
	if !errors.Is(err, rdma.ErrAuth) || !strings.Contains(err.Error(), "uid "+uid) {
		t.Fatalf("Dial: %v, want ErrAuth naming uid %s", err, uid)
	}
	rest, _ := io.ReadAll(rd)
	if o := string(rest); !strings.Contains(o, "closed") || strings.Contains(o, "GOT FDS") {
		t.Fatalf("foreign listener: %s", o)
	}
}
