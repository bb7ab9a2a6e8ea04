//go:build linux

package shm

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// A process of another uid that connects to the abstract socket (which has
// no permissions to stop it) is refused by the SO_PEERCRED check, with no
// token configured as with one. Needs root to run the client as nobody.
func TestOtherUIDRefused(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to start a client as another uid")
	}
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
    while s.recv(4096): pass
except Exception: pass
print("closed")`
			cmd := exec.Command(py, "-c", script, addr, strconv.FormatUint(segMagic, 10), strconv.Itoa(segVersion))
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
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
				t.Fatal("a connection from uid 65534 was accepted")
			}
			if !errors.Is(err, rdma.ErrAuth) || !strings.Contains(err.Error(), "uid 65534") {
				t.Fatalf("Accept: %v, want ErrAuth naming uid 65534", err)
			}
			if o := <-out; !strings.Contains(o, "closed") {
				t.Fatalf("client: %s", o)
			}
		})
	}
}
