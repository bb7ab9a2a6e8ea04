package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestTable(t *testing.T) {
	for _, dt := range []string{"float", "bfloat16", "int8", "double"} {
		for _, op := range []string{"sum", "avg", "prod", "max"} {
			var out bytes.Buffer
			o := options{minBytes: 8, maxBytes: 4096, factor: 8, iters: 2, warmup: 1, check: true, dtype: dt, op: op, np: 3, transport: "mem"}
			wrong, err := run(context.Background(), o, &out)
			if err != nil {
				t.Fatalf("%s %s: %v", dt, op, err)
			}
			if wrong != 0 || !strings.Contains(out.String(), "Out of bounds values : 0 OK") {
				t.Fatalf("%s %s: %d wrong:\n%s", dt, op, wrong, out.String())
			}
			if rows := strings.Count(out.String(), "\n "); rows != 4 {
				t.Fatalf("%s %s: %d rows, want 4:\n%s", dt, op, rows, out.String())
			}
		}
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"8": 8, "4K": 4096, "32M": 32 << 20, "1G": 1 << 30} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v", in, got, err)
		}
	}
	if _, err := parseSize("lots"); err == nil {
		t.Error("parseSize(lots) succeeded")
	}
}

// TestBroadcastSizes runs what bench/compare runs: -coll broadcast and an
// explicit -sizes list, and checks the row count and the parsed columns.
func TestBroadcastSizes(t *testing.T) {
	for _, coll := range []string{"broadcast", "allreduce"} {
		var out bytes.Buffer
		o := options{sizes: []int64{8, 4096, 1 << 17}, iters: 2, warmup: 1, check: true, dtype: "float32", op: "sum", np: 4, transport: "mem", coll: coll}
		wrong, err := run(context.Background(), o, &out)
		if err != nil || wrong != 0 {
			t.Fatalf("%s: %d wrong, %v:\n%s", coll, wrong, err, out.String())
		}
		var sizes []string
		for _, line := range strings.Split(out.String(), "\n") {
			if f := strings.Fields(line); len(f) == 12 && !strings.HasPrefix(line, "#") {
				sizes = append(sizes, f[0])
				if f[11] != "0" {
					t.Errorf("%s: row %q has wrong elements", coll, line)
				}
			}
		}
		if strings.Join(sizes, ",") != "8,4096,131072" {
			t.Fatalf("%s: sizes %v:\n%s", coll, sizes, out.String())
		}
	}
}

// TestGatherScatter runs -coll allgather and reducescatter (and allreduce
// and broadcast), each timed per call and back to back (-batch), over 4
// ranks, and checks that every result is right (in place too: send as
// recv's block, recv as send's). The sizes make blocks of 1 to 16,384
// elements, none a multiple of 3, so that a block misplaced by a rank
// changes a sum (rank r's element i is (r+i)%3+1: value).
func TestGatherScatter(t *testing.T) {
	for _, coll := range []string{"allgather", "reducescatter", "allreduce", "broadcast"} {
		for _, dt := range []string{"float", "int8", "bfloat16"} {
			for _, op := range []string{"sum", "avg", "max"} {
				for _, batch := range []bool{false, true} {
					var out bytes.Buffer
					o := options{sizes: []int64{16, 112, 4096, 1 << 17}, iters: 3, warmup: 1, check: true, dtype: dt, op: op, np: 4, transport: "mem", coll: coll, batch: batch}
					wrong, err := run(context.Background(), o, &out)
					if err != nil || wrong != 0 || !strings.Contains(out.String(), "Out of bounds values : 0 OK") {
						t.Fatalf("%s %s %s batch %v: %d wrong, %v:\n%s", coll, dt, op, batch, wrong, err, out.String())
					}
					if rows := strings.Count(out.String(), "\n "); rows != 4 {
						t.Fatalf("%s %s %s: %d rows, want 4:\n%s", coll, dt, op, rows, out.String())
					}
				}
			}
		}
	}
}

// TestBarrier runs -coll barrier as bench/compare does: one row of size 0
// with a positive time.
func TestBarrier(t *testing.T) {
	var out bytes.Buffer
	o := options{sizes: []int64{8}, iters: 3, warmup: 1, dtype: "float32", op: "sum", np: 3, transport: "mem", coll: "barrier"}
	if wrong, err := run(context.Background(), o, &out); err != nil || wrong != 0 {
		t.Fatalf("%d wrong, %v:\n%s", wrong, err, out.String())
	}
	var rows [][]string
	for _, line := range strings.Split(out.String(), "\n") {
		if f := strings.Fields(line); len(f) == 12 && !strings.HasPrefix(line, "#") {
			rows = append(rows, f)
		}
	}
	if len(rows) != 1 || rows[0][0] != "0" || rows[0][8] == "0.00" {
		t.Fatalf("rows %q:\n%s", rows, out.String())
	}
}

// TestRedopColumn: the redop column, and the header's op, name the
// reduction of the collectives that have one (-o) and say "none" for
// those that have none, as nccl-tests prints (it said "sum" for an
// allgather or a broadcast).
func TestRedopColumn(t *testing.T) {
	for coll, want := range map[string]string{"allreduce": "max", "reducescatter": "max", "broadcast": "none", "allgather": "none", "barrier": "none"} {
		var out bytes.Buffer
		o := options{sizes: []int64{4096}, iters: 1, warmup: 0, check: true, dtype: "float", op: "max", np: 2, transport: "mem", coll: coll}
		if wrong, err := run(context.Background(), o, &out); err != nil || wrong != 0 {
			t.Fatalf("%s: %d wrong, %v:\n%s", coll, wrong, err, out.String())
		}
		rows := 0
		for _, line := range strings.Split(out.String(), "\n") {
			if f := strings.Fields(line); len(f) == 12 && !strings.HasPrefix(line, "#") {
				rows++
				if f[3] != want {
					t.Errorf("%s: redop %q, want %q: %s", coll, f[3], want, line)
				}
			}
			if strings.HasPrefix(line, "# gorun allreduce_perf:") && strings.Contains(line, " op ") && !strings.Contains(line, " op "+want+",") {
				t.Errorf("%s: header %q, want op %s", coll, line, want)
			}
		}
		if rows != 1 {
			t.Errorf("%s: %d rows, want 1:\n%s", coll, rows, out.String())
		}
	}
}
