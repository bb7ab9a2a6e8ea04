package tcp

import (
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

func counters(d rdma.Device) rdma.Counters { return d.(rdma.CounterSource).Counters() }

// Each refusal is counted once, on the device that refused.
// (ChecksumErrors: TestChecksumDetectsCorruption.)
func TestCounters(t *testing.T) {
	t.Run("access", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			acc  rdma.Access
			post func(a rdma.Conn, src, dst *rdma.MR) error
		}{
			{"write-bad-rkey", rdma.AccessRemoteWrite, func(a rdma.Conn, src, dst *rdma.MR) error {
				return a.PostWrite(1, src.Bytes(), src, 0, dst.Addr(), dst.RKey()+1)
			}},
			{"write-out-of-bounds", rdma.AccessRemoteWrite, func(a rdma.Conn, src, dst *rdma.MR) error {
				return a.PostWrite(1, src.Bytes(), src, 0, dst.Addr()+1, dst.RKey())
			}},
			{"read-not-granted", rdma.AccessRemoteWrite, func(a rdma.Conn, src, dst *rdma.MR) error {
				return a.PostRead(1, src.Bytes(), src, 0, dst.Addr(), dst.RKey())
			}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				a, b, devA, devB := pair(t, rdma.Config{})
				src := mustReg(t, devA, make([]byte, 64), rdma.AccessLocalWrite)
				dst := mustReg(t, devB, make([]byte, 64), tc.acc)
				// The second bad request is drained by the target in the
				// error state, not counted again.
				must(t, tc.post(a, src, dst))
				must(t, tc.post(a, src, dst))
				if wc := sendComp(t, a); wc.Status != rdma.StatusRemoteAccessError {
					t.Fatalf("wc %+v", wc)
				}
				sendComp(t, a)
				waitErr(t, b)
				if got := counters(devB); got != (rdma.Counters{AccessViolations: 1}) {
					t.Fatalf("target counters %+v", got)
				}
				if got := counters(devA); got != (rdma.Counters{}) {
					t.Fatalf("initiator counters %+v", got)
				}
			})
		}
	})
	t.Run("auth", func(t *testing.T) {
		for _, tc := range []struct {
			name         string
			dial, accept []byte
			wantA, wantB uint64
		}{
			{"wrong", []byte("guess"), []byte("secret"), 1, 1}, // each refuses the other's proof
			{"missing", nil, []byte("secret"), 0, 1},
			{"unexpected", []byte("secret"), nil, 1, 0},
			{"right", []byte("secret"), []byte("secret"), 0, 0},
		} {
			t.Run(tc.name, func(t *testing.T) {
				devA, devB, _, _ := handshakePair(t, rdma.Config{Token: tc.dial}, rdma.Config{Token: tc.accept})
				if got := counters(devA); got != (rdma.Counters{AuthFailures: tc.wantA}) {
					t.Fatalf("dialer counters %+v", got)
				}
				if got := counters(devB); got != (rdma.Counters{AuthFailures: tc.wantB}) {
					t.Fatalf("acceptor counters %+v", got)
				}
			})
		}
	})
	t.Run("protocol", func(t *testing.T) {
		a, b, devA, devB := pair(t, rdma.Config{})
		b.(*conn).nc.Write(sealed(header{op: opMax})) // an unknown op, under a good CRC
		waitErr(t, a)
		if got := counters(devA); got != (rdma.Counters{ProtocolErrors: 1}) {
			t.Fatalf("counters %+v", got)
		}
		if got := counters(devB); got != (rdma.Counters{}) {
			t.Fatalf("peer counters %+v", got)
		}
	})
}

// handshakePair dials from a device opened with dial to one opened with
// accept, and returns both devices and both ends' errors.
func handshakePair(t *testing.T, dial, accept rdma.Config) (devA, devB rdma.Device, errA, errB error) {
	t.Helper()
	ctx := testCtx(t)
	devA, _ = rdma.OpenConfig("tcp", dial)
	devB, _ = rdma.OpenConfig("tcp", accept)
	t.Cleanup(func() { devA.Close(); devB.Close() })
	ln, err := devB.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ch := make(chan error, 1)
	go func() {
		_, err := ln.Accept(ctx)
		ch <- err
	}()
	_, errA = devA.Dial(ctx, ln.Addr().String())
	return devA, devB, errA, <-ch
}

// waitErr waits for c to enter the error state and returns why.
func waitErr(t *testing.T, c rdma.Conn) error {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for c.Err() == nil && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	return c.Err()
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
