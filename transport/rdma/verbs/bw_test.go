//go:build linux && cgo && rdma

package verbs

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

const (
	bwSize     = 64 << 10 // bytes per write, as ib_write_bw -s 65536
	bwSeconds  = 3        // as ib_write_bw -D 3
	bwWindow   = 128      // outstanding writes, ib_write_bw's default tx depth
	bwSignalEv = 16       // every 16th write is signaled
)

// ibWriteBW runs ib_write_bw (perftest) server and client on rxe0 and
// returns the client's average bandwidth in MB/s.
func ibWriteBW(t *testing.T, ip string, extra ...string) float64 {
	t.Helper()
	path, err := exec.LookPath("ib_write_bw")
	if err != nil {
		t.Skip("ib_write_bw not installed (perftest)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := append([]string{"-d", "rxe0", "-s", strconv.Itoa(bwSize), "-D", strconv.Itoa(bwSeconds), "-F"}, extra...)
	srv := exec.CommandContext(ctx, path, args...)
	var sout bytes.Buffer
	srv.Stdout, srv.Stderr = &sout, &sout
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Process.Kill()
	var out []byte
	for i := 0; i < 20; i++ { // until the server listens
		time.Sleep(500 * time.Millisecond)
		cli := exec.CommandContext(ctx, path, append(args, ip)...)
		if out, err = cli.CombinedOutput(); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("ib_write_bw client: %v\n%s\nserver:\n%s", err, out, sout.Bytes())
	}
	srv.Wait()
	// #bytes #iterations BW peak[MB/sec] BW average[MB/sec] MsgRate[Mpps]
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 4 && f[0] == strconv.Itoa(bwSize) {
			if v, err := strconv.ParseFloat(f[3], 64); err == nil {
				return v
			}
		}
	}
	t.Fatalf("no bandwidth line in ib_write_bw output:\n%s", out)
	return 0
}

// gorunWriteBW streams 64 KiB PostWrites for bwSeconds with bwWindow
// outstanding and returns MB/s (10^6 bytes, as perftest reports).
func gorunWriteBW(t *testing.T, cli, srv rdma.Conn, d rdma.Device) float64 {
	t.Helper()
	src, err := d.Alloc(bwSize, rdma.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	dst, err := d.Alloc(bwSize, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var posted, done uint64
	start := time.Now()
	deadline := start.Add(bwSeconds * time.Second)
	for {
		// Stop posting after the deadline, but only after a signaled write.
		for posted-done < bwWindow && (time.Now().Before(deadline) || posted%bwSignalEv != 0) {
			f := rdma.Flags(0)
			if (posted+1)%bwSignalEv == 0 {
				f = rdma.FlagSignaled
			}
			if err := cli.PostWrite(posted+1, src.Bytes(), src, f, dst.Addr(), dst.RKey()); err != nil {
				t.Fatal(err)
			}
			posted++
		}
		if done == posted {
			break
		}
		wc, err := cli.GetSendComp(ctx)
		if err != nil || wc.Status != rdma.StatusSuccess {
			t.Fatalf("write completion %+v %v", wc, err)
		}
		done = wc.WRID
	}
	el := time.Since(start)
	return float64(done) * bwSize / el.Seconds() / 1e6
}

// TestWriteBandwidthVsIBWriteBW reports gorun's PostWrite bandwidth beside
// ib_write_bw's on the same rxe0 (both endpoints in the VM), as a ratio.
func TestWriteBandwidthVsIBWriteBW(t *testing.T) {
	ip := vmIP(t)
	if testing.Short() && os.Getenv("GORUN_VERBS_BW") == "" {
		t.Skip("takes ~15 s: set GORUN_VERBS_BW=1 (scripts/rxe-vm/test.sh does) or drop -short")
	}
	ib := ibWriteBW(t, ip)
	d := openDev(t, rdma.Config{})
	cli, srv := pair(t, d)
	g := gorunWriteBW(t, cli, srv, d)
	// ib_write_bw busy-polls in both processes (perftest has no events for
	// WRITE); under TCG those spinning vCPUs compete with rxe's own kernel
	// work, while gorun sleeps on the completion channel once idle.
	line := fmt.Sprintf("BANDWIDTH 64KiB writes, %ds, rxe0 under qemu: ib_write_bw %.2f MB/s, gorun PostWrite %.2f MB/s, ratio gorun/ib_write_bw %.2f",
		bwSeconds, ib, g, g/ib)
	t.Log(line)
	fmt.Println(line)
}
