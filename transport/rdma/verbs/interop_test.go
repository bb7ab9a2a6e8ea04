//go:build linux && cgo && rdma

package verbs

import (
	"bytes"
	"context"
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// rdmacm-utils' rdma_server and rdma_client (librdmacm/examples) exchange
// one 16-byte message each way with rdma_post_recv/rdma_post_send on port
// 7471, using synchronous ids (rdma_create_ep): their rdma_disconnect waits
// for ours.
const interopPort = "7471"

func lookTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s not installed (rdmacm-utils)", name)
	}
	return p
}

// TestInteropRdmaServer: gorun dials rdma_server, sends, receives.
func TestInteropRdmaServer(t *testing.T) {
	ip := vmIP(t)
	srvPath := lookTool(t, "rdma_server")
	d := openDev(t, rdma.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, srvPath, "-s", ip, "-p", interopPort)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	var c rdma.Conn
	var err error
	for c == nil && ctx.Err() == nil { // until rdma_server listens
		dctx, dcancel := context.WithTimeout(ctx, 5*time.Second)
		if c, err = d.Dial(dctx, ip+":"+interopPort); err != nil {
			time.Sleep(100 * time.Millisecond)
		}
		dcancel()
	}
	if c == nil {
		t.Fatalf("dial rdma_server: %v\n%s", err, out.Bytes())
	}
	rb, _ := d.Alloc(16, rdma.AccessLocalWrite)
	msg := []byte("gorun->rdma_srv!")
	if err := c.PostRecv(1, rb.Bytes(), rb); err != nil {
		t.Fatal(err)
	}
	if err := c.PostSend(2, msg, nil, rdma.FlagSignaled|rdma.FlagInline); err != nil {
		t.Fatal(err)
	}
	wc, err := c.GetSendComp(ctx)
	mustWC(t, wc, err, 2, rdma.OpSend)
	wc, err = c.GetRecvComp(ctx)
	if wc = mustWC(t, wc, err, 1, rdma.OpRecv); wc.ByteLen != 16 {
		t.Fatalf("received %d bytes from rdma_server, want 16", wc.ByteLen)
	}
	c.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("rdma_server: %v\n%s", err, out.Bytes())
	}
	t.Logf("rdma_server output:\n%s", out.Bytes())
}

// TestInteropRdmaClient: rdma_client dials gorun's listener.
func TestInteropRdmaClient(t *testing.T) {
	ip := vmIP(t)
	cliPath := lookTool(t, "rdma_client")
	d := openDev(t, rdma.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ln, err := d.Listen(ctx, ip+":"+interopPort)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if got := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port); got != interopPort {
		t.Fatalf("listener port %s", got)
	}
	cmd := exec.CommandContext(ctx, cliPath, "-s", ip, "-p", interopPort)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	c, err := ln.Accept(ctx)
	if err != nil {
		t.Fatalf("accept rdma_client: %v\n%s", err, out.Bytes())
	}
	defer c.Close()
	rb, _ := d.Alloc(16, rdma.AccessLocalWrite)
	sb, _ := d.Alloc(16, rdma.AccessLocalWrite)
	copy(sb.Bytes(), "rdma_cli<-gorun!")
	// rdma_client sends right after connecting; it retries until this
	// receive is posted (its rnr_retry_count is 7, "forever").
	if err := c.PostRecv(1, rb.Bytes(), rb); err != nil {
		t.Fatal(err)
	}
	wc, err := c.GetRecvComp(ctx)
	if wc = mustWC(t, wc, err, 1, rdma.OpRecv); wc.ByteLen != 16 {
		t.Fatalf("received %d bytes from rdma_client, want 16", wc.ByteLen)
	}
	if err := c.PostSend(2, sb.Bytes(), sb, rdma.FlagSignaled); err != nil {
		t.Fatal(err)
	}
	wc, err = c.GetSendComp(ctx)
	mustWC(t, wc, err, 2, rdma.OpSend)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("rdma_client: %v\n%s", err, out.Bytes())
	}
	t.Logf("rdma_client output:\n%s", out.Bytes())
}
