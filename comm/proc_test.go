package comm

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/collectives"
)

// Cross-process tests: the test binary re-runs itself as each rank (as
// os/exec's tests do). The ranks meet through a test-only rendezvous, a
// loopback TCP server in the parent that gathers every rank's endpoint
// blob and sends all of them back, then connect over tcp or shm.

const procChildEnv = "GORUN_PROC_TEST_CHILD" // mode: "check" or "kill"

// tcpRendezvous is the child's side of the test rendezvous.
type tcpRendezvous struct {
	addr string
	r, n int
}

func (t *tcpRendezvous) rank() int { return t.r }
func (t *tcpRendezvous) size() int { return t.n }

func (t *tcpRendezvous) exchange(ctx context.Context, mine []byte) ([][]byte, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", t.addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	msg := binary.LittleEndian.AppendUint32(nil, uint32(t.r))
	msg = binary.LittleEndian.AppendUint16(msg, uint16(len(mine)))
	if _, err := conn.Write(append(msg, mine...)); err != nil {
		return nil, err
	}
	blobs := make([][]byte, t.n)
	for i := range blobs {
		var l [2]byte
		if _, err := io.ReadFull(conn, l[:]); err != nil {
			return nil, err
		}
		blobs[i] = make([]byte, binary.LittleEndian.Uint16(l[:]))
		if _, err := io.ReadFull(conn, blobs[i]); err != nil {
			return nil, err
		}
	}
	return blobs, nil
}

// serveRendezvous gathers n blobs on ln and returns them to everyone.
func serveRendezvous(ln net.Listener, n int) {
	conns := make([]net.Conn, n)
	blobs := make([][]byte, n)
	for range n {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		var h [6]byte
		if _, err := io.ReadFull(c, h[:]); err != nil {
			c.Close()
			return
		}
		r := int(binary.LittleEndian.Uint32(h[:]))
		b := make([]byte, binary.LittleEndian.Uint16(h[4:]))
		if _, err := io.ReadFull(c, b); err != nil || r < 0 || r >= n {
			c.Close()
			return
		}
		conns[r], blobs[r] = c, b
	}
	var out []byte
	for _, b := range blobs {
		out = binary.LittleEndian.AppendUint16(out, uint16(len(b)))
		out = append(out, b...)
	}
	for _, c := range conns {
		if c != nil {
			c.Write(out)
			c.Close()
		}
	}
}

func TestProcChild(t *testing.T) {
	mode := os.Getenv(procChildEnv)
	if mode == "" {
		t.Skip("run by TestProcesses and TestProcessKilled")
	}
	rank, _ := strconv.Atoi(os.Getenv("PROC_RANK"))
	size, _ := strconv.Atoi(os.Getenv("PROC_SIZE"))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cfg, err := newConfig(WithTransport(os.Getenv("PROC_TRANSPORT")), WithTimeout(20*time.Second), WithToken([]byte("proc-test")))
	if err != nil {
		t.Fatal(err)
	}
	c, err := newComm(ctx, cfg, &tcpRendezvous{addr: os.Getenv("PROC_RV"), r: rank, n: size})
	if err != nil {
		fmt.Printf("RANK %d INIT ERROR: %v\n", rank, err)
		t.Fatal(err)
	}
	defer c.Close()
	switch mode {
	case "check":
		for _, algo := range collectives.Algos(collectives.AllReduce) {
			c.cfg.algos[collectives.AllReduce] = algo
			for ci, count := range []int{0, 1, size - 1, size + 1, 1000, 100_000} {
				for _, f := range []func() error{
					func() error { return rankRound[float32](ctx, c, ci, count, []Op{Sum, Max}, "") },
					func() error { return rankRound[BFloat16](ctx, c, ci, count, []Op{Avg}, "allreduce") },
					func() error { return rankRound[int64](ctx, c, ci, count, []Op{Prod, Min}, "allreduce") },
				} {
					if err := f(); err != nil {
						fmt.Printf("RANK %d FAILED: algo %s count %d: %v\n", rank, algo, count, err)
						t.Fatal(err)
					}
				}
			}
		}
		fmt.Printf("RANK %d OK\n", rank)
	case "vector": // vector_test.go
		for ci, count := range []int{0, 1, size + 1, 1000, 40_000} {
			if err := vectorRound[float32](ctx, c, ci, count); err != nil {
				fmt.Printf("RANK %d FAILED: count %d: %v\n", rank, count, err)
				t.Fatal(err)
			}
			if err := vectorRound[int16](ctx, c, ci, count); err != nil {
				fmt.Printf("RANK %d FAILED: count %d: %v\n", rank, count, err)
				t.Fatal(err)
			}
		}
		fmt.Printf("RANK %d OK\n", rank)
	case "p2p": // p2p_test.go
		for round := range 2 {
			if err := p2pRound(ctx, c, round); err != nil {
				fmt.Printf("RANK %d FAILED: round %d: %v\n", rank, round, err)
				t.Fatal(err)
			}
		}
		fmt.Printf("RANK %d OK\n", rank)
	case "kill":
		buf := make([]float32, 1<<20)
		for i := 0; ; i++ {
			if i == 3 {
				fmt.Printf("RANK %d LOOPING\n", rank)
			}
			start := time.Now()
			err := AllReduce(ctx, c, buf, buf, Sum)
			if err != nil {
				var re *RankError
				errors.As(err, &re)
				fmt.Printf("RANK %d ERROR after %v: peerfailed=%v rank=%d: %v\n", rank, time.Since(start).Round(time.Millisecond), errors.Is(err, ErrPeerFailed), re.Rank, err)
				return
			}
		}
	}
}

type child struct {
	cmd *exec.Cmd
	out *lockedOut
}

type lockedOut struct {
	mu sync.Mutex
	sb strings.Builder
}

func (l *lockedOut) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sb.Write(p)
}

func (l *lockedOut) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sb.String()
}

// startRanks starts n children of mode over transport.
func startRanks(t *testing.T, n int, mode, transport string) []*child {
	if testing.Short() && mode != "kill" && raceEnabled {
		t.Skip("cross-process matrix: not in -short under -race")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go serveRendezvous(ln, n)
	kids := make([]*child, n)
	for r := range n {
		cmd := exec.Command(os.Args[0], "-test.run=^TestProcChild$", "-test.v", "-test.timeout=120s")
		cmd.Env = append(os.Environ(), procChildEnv+"="+mode, "PROC_RANK="+strconv.Itoa(r), "PROC_SIZE="+strconv.Itoa(n),
			"PROC_TRANSPORT="+transport, "PROC_RV="+ln.Addr().String(), "GORUN_TRANSPORT=", "GORUN_ALGO=")
		out := &lockedOut{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		kids[r] = &child{cmd: cmd, out: out}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	}
	return kids
}

func TestProcesses(t *testing.T) {
	for _, tc := range []struct{ transport, mode string }{{"tcp", "check"}, {"shm", "check"}, {"tcp", "vector"}, {"shm", "vector"}} {
		t.Run(tc.transport+"/"+tc.mode, func(t *testing.T) {
			kids := startRanks(t, 4, tc.mode, tc.transport)
			for r, k := range kids {
				err := k.cmd.Wait()
				if err != nil || !strings.Contains(k.out.String(), fmt.Sprintf("RANK %d OK", r)) {
					t.Fatalf("rank %d: %v\n%s", r, err, k.out.String())
				}
			}
		})
	}
}

// TestProcessKilled SIGKILLs rank 2 in the middle of a stream of 4 MiB
// allreduces: every other rank must fail with ErrPeerFailed naming rank 2,
// well within the communicator's 20 s timeout.
func TestProcessKilled(t *testing.T) {
	for _, transport := range []string{"tcp", "shm"} {
		t.Run(transport, func(t *testing.T) {
			kids := startRanks(t, 4, "kill", transport)
			deadline := time.Now().Add(60 * time.Second)
			for !strings.Contains(kids[2].out.String(), "LOOPING") {
				if time.Now().After(deadline) {
					t.Fatalf("rank 2 never started looping:\n%s", kids[2].out.String())
				}
				time.Sleep(10 * time.Millisecond)
			}
			killed := time.Now()
			kids[2].cmd.Process.Signal(syscall.SIGKILL)
			for r, k := range kids {
				if r == 2 {
					continue
				}
				k.cmd.Wait()
				out := k.out.String()
				line := ""
				sc := bufio.NewScanner(strings.NewReader(out))
				for sc.Scan() {
					if strings.HasPrefix(sc.Text(), fmt.Sprintf("RANK %d ERROR", r)) {
						line = sc.Text()
					}
				}
				if !strings.Contains(line, "peerfailed=true rank=2:") {
					t.Fatalf("rank %d did not fail naming rank 2:\n%s", r, out)
				}
			}
			if d := time.Since(killed); d > 15*time.Second {
				t.Fatalf("survivors took %v to fail", d)
			}
			t.Logf("survivors failed within %v of the kill", time.Since(killed).Round(time.Millisecond))
		})
	}
}
