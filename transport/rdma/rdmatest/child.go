package rdmatest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// ChildEnv is set, to the provider's name, in the environment of a
// conformance child: the test binary re-run to serve as the peer.
const ChildEnv = "GORUN_RDMATEST_CHILD"

// childLifetime bounds a child's life whatever its parent does.
const childLifetime = 15 * time.Minute

// Main is for TestMain: in a conformance child it serves the peer and
// returns the child's exit code; otherwise it returns m.Run().
func Main(m *testing.M) int {
	prov := os.Getenv(ChildEnv)
	if prov == "" {
		return m.Run()
	}
	in, out := os.NewFile(3, "rdmatest-ctl-in"), os.NewFile(4, "rdmatest-ctl-out")
	if in == nil || out == nil {
		fmt.Fprintln(os.Stderr, "rdmatest child: control pipes missing")
		return 2
	}
	done := make(chan error, 1)
	go func() { done <- serve(prov, in, out) }()
	select {
	case err := <-done:
		if err != nil {
			fmt.Fprintln(os.Stderr, "rdmatest child:", err)
			return 1
		}
		return 0
	case <-time.After(childLifetime):
		fmt.Fprintln(os.Stderr, "rdmatest child: lifetime exceeded")
		return 3
	}
}

// serve answers requests until EOF (the parent went away) or "exit".
func serve(prov string, r io.Reader, w io.Writer) error {
	p := newLocalPeer(prov)
	defer p.Close()
	dec, enc := json.NewDecoder(r), json.NewEncoder(w)
	for {
		var q request
		if err := dec.Decode(&q); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if q.Op == "exit" {
			return nil
		}
		resp := handle(p, &q)
		if err := enc.Encode(&resp); err != nil {
			return err
		}
	}
}

// remotePeer drives a peer through the control protocol; its conn
// methods act on the peer's conn k.
type remotePeer struct {
	*ctl
	k int
}

// ctl is the control channel that the views On returns share.
type ctl struct {
	mu     sync.Mutex
	w      *os.File
	r      *os.File
	enc    *json.Encoder
	dec    *json.Decoder
	broken error
	stop   func() error // ends the server side
	kill   func() error // ends it abruptly: SIGKILL to the child
	pid    int          // the child's, if there is one
}

// startChild re-runs the test binary as a conformance child.
func startChild(provider string) (*remotePeer, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cr, pw, err := os.Pipe() // parent → child
	if err != nil {
		return nil, err
	}
	pr, cw, err := os.Pipe() // child → parent
	if err != nil {
		cr.Close()
		pw.Close()
		return nil, err
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), ChildEnv+"="+provider)
	cmd.ExtraFiles = []*os.File{cr, cw}
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.SysProcAttr = childAttr()
	cmd.WaitDelay = 5 * time.Second
	// Pdeathsig fires when the thread that forked the child exits, not
	// the process: fork from a locked thread that lives as long as the
	// child.
	started, waited := make(chan error, 1), make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		waited <- cmd.Wait()
	}()
	err = <-started
	cr.Close()
	cw.Close()
	if err != nil {
		pr.Close()
		pw.Close()
		return nil, err
	}
	rp := newRemotePeer(pr, pw)
	rp.pid = cmd.Process.Pid
	rp.stop = func() error {
		pw.Close() // EOF: the child closes its session and exits
		select {
		case err := <-waited:
			pr.Close()
			return err
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-waited
			pr.Close()
			return errors.New("rdmatest child did not exit; killed")
		}
	}
	rp.kill = func() error {
		cmd.Process.Kill()
		rp.stop() // reaps it; its exit status is the kill's
		return nil
	}
	if _, err := rp.call(request{Op: "hello"}); err != nil {
		rp.stop()
		return nil, fmt.Errorf("conformance child did not answer (does the package's TestMain call rdmatest.Main?): %w", err)
	}
	return rp, nil
}

// pipePeer serves the protocol from a goroutine of this process: the
// remote peer's code path without a child, for testing the suite itself.
func pipePeer(provider string) (*remotePeer, error) {
	cr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	pr, cw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() {
		err := serve(provider, cr, cw)
		cr.Close()
		cw.Close()
		done <- err
	}()
	rp := newRemotePeer(pr, pw)
	rp.stop = func() error {
		pw.Close()
		err := <-done
		pr.Close()
		return err
	}
	rp.kill = rp.stop // no process to kill: the server closes its session
	return rp, nil
}

func newRemotePeer(r, w *os.File) *remotePeer {
	return &remotePeer{ctl: &ctl{r: r, w: w, enc: json.NewEncoder(w), dec: json.NewDecoder(r)}}
}

func (c *remotePeer) On(k int) peer { return &remotePeer{ctl: c.ctl, k: k} }

func (c *remotePeer) ListenMore(addr string) (string, error) {
	r, err := c.call(request{Op: "listenmore", Addr: addr})
	return r.Addr, err
}

func (c *remotePeer) AcceptMore(timeout time.Duration) (int, error) {
	r, err := c.call(request{Op: "acceptmore", Timeout: timeout})
	return r.N, err
}

// call sends one request and waits for its answer, at most the request's
// own timeout plus a margin; a lost answer breaks the peer for good.
func (c *remotePeer) call(q request) (response, error) {
	q.Conn = c.k
	c.mu.Lock()
	defer c.mu.Unlock()
	var resp response
	if c.broken != nil {
		return resp, c.broken
	}
	margin := 60 * time.Second // covers the slowest call without a timeout (a 64 MiB fill)
	if q.Op == "hello" {
		margin = 10 * time.Second
	}
	deadline := time.Now().Add(q.Timeout + margin)
	c.w.SetWriteDeadline(deadline)
	c.r.SetReadDeadline(deadline)
	if err := c.enc.Encode(&q); err != nil {
		c.broken = fmt.Errorf("rdmatest: control pipe to peer: %w", err)
		return resp, c.broken
	}
	if err := c.dec.Decode(&resp); err != nil {
		c.broken = fmt.Errorf("rdmatest: control pipe from peer (%s): %w", q.Op, err)
		return resp, c.broken
	}
	return resp, resp.Err.toErr()
}

func (c *remotePeer) shutdown() error { return c.stop() }

func (c *remotePeer) Listen(cfg rdma.Config, addr string) (string, error) {
	r, err := c.call(request{Op: "listen", Config: cfg, Addr: addr})
	return r.Addr, err
}

func (c *remotePeer) Accept(timeout time.Duration) error {
	_, err := c.call(request{Op: "accept", Timeout: timeout})
	return err
}

func (c *remotePeer) Buf(n int, access rdma.Access, heap bool) (rbuf, error) {
	r, err := c.call(request{Op: "buf", N: n, Access: access, Heap: heap})
	return r.Buf, err
}

func (c *remotePeer) Fill(b rbuf, off, n int, seed uint64) error {
	_, err := c.call(request{Op: "fill", Buf: b, Off: off, N: n, Seed: seed})
	return err
}

func (c *remotePeer) Sum(b rbuf, off, n int) (uint32, error) {
	r, err := c.call(request{Op: "sum", Buf: b, Off: off, N: n})
	return r.Sum, err
}

func (c *remotePeer) Read(b rbuf, off, n int) ([]byte, error) {
	r, err := c.call(request{Op: "read", Buf: b, Off: off, N: n})
	if err == nil && r.Data == nil {
		r.Data = []byte{}
	}
	return r.Data, err
}

func (c *remotePeer) Deregister(b rbuf) error {
	_, err := c.call(request{Op: "dereg", Buf: b})
	return err
}

func (c *remotePeer) PostRecv(wrid uint64, segs []seg) error {
	_, err := c.call(request{Op: "recv", WRID: wrid, Segs: segs})
	return err
}

func (c *remotePeer) Post(ps ...postReq) error {
	_, err := c.call(request{Op: "post", Posts: ps})
	return err
}

func (c *remotePeer) RecvComp(timeout time.Duration) (rdma.WC, error) {
	r, err := c.call(request{Op: "recvcomp", Timeout: timeout})
	return r.WC, err
}

func (c *remotePeer) SendComp(timeout time.Duration) (rdma.WC, error) {
	r, err := c.call(request{Op: "sendcomp", Timeout: timeout})
	return r.WC, err
}

func (c *remotePeer) RecvCompSum(timeout time.Duration, b rbuf, off, n int) (rdma.WC, uint32, error) {
	r, err := c.call(request{Op: "recvcompsum", Timeout: timeout, Buf: b, Off: off, N: n})
	return r.WC, r.Sum, err
}

func (c *remotePeer) ConnErr() (error, error) {
	r, err := c.call(request{Op: "connerr"})
	return r.ConnErr.toErr(), err
}

func (c *remotePeer) CloseConn() error {
	_, err := c.call(request{Op: "closeconn"})
	return err
}

func (c *remotePeer) Close() error {
	_, err := c.call(request{Op: "close"})
	return err
}
