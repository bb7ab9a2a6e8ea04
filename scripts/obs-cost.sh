#!/bin/sh
# obs-cost.sh: what observability costs an operation, measured as ratios of
# interleaved runs (the machine's load moves absolute figures too much).
#
#   off: comm's test binary as built, timeline and metrics off, against
#        the same code built with -tags gorun_noobs, which compiles out the
#        observer's nil check per operation and the engine's per message;
#   on:  the same binary with the timeline on against off.
#
# Benchmarks: BenchmarkOpOverhead (an 8-byte allreduce on one rank: all
# but data movement) and BenchmarkAllReduce/algo=ring/ranks=2/bytes=8B
# (two in-process ranks exchanging messages).
#
# Each run of a benchmark takes the best of 3 (-count 3), which filters
# out most preemptions on a loaded machine; the ratios pair runs made
# back to back.
#
# usage: scripts/obs-cost.sh [PAIRS [OPS]]
# (default 12 pairs; OPS 100000 allreduces, 20 times as many OpOverhead ops)
set -eu
pairs=${1:-12}
ops=${2:-100000}
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go test -c -o "$tmp/with.test" ./comm
go test -c -tags gorun_noobs -o "$tmp/without.test" ./comm

bench() { # binary pattern ops: the best ns/op of 3
	"$1" -test.run '^$' -test.bench "$2" -test.benchtime "${3}x" -test.count 3 |
		awk '/^Benchmark/ { for (i = 1; i < NF; i++) if ($(i+1) == "ns/op" && (best == "" || $i + 0 < best + 0)) { name = $1; best = $i } }
			END { print name, best }'
}
over='^BenchmarkOpOverhead$/^timeline=off$'
on='^BenchmarkOpOverhead$/^timeline=on$'
ar='^BenchmarkAllReduce$/^algo=ring$/^ranks=2$/^bytes=8B$'
i=0
while [ "$i" -lt "$pairs" ]; do
	# Alternate which build runs first, so drift in the load favours neither.
	if [ $((i % 2)) -eq 0 ]; then order="with without"; else order="without with"; fi
	for b in $order; do
		bench "$tmp/$b.test" "$over" $((ops * 20)) | sed "s/^/$b /"
		bench "$tmp/$b.test" "$ar" "$ops" | sed "s/^/$b /"
	done
	bench "$tmp/with.test" "$on" $((ops * 20)) | sed "s/^/with /"
	i=$((i + 1))
done >"$tmp/raw"

python3 - "$tmp/raw" <<'EOF'
import re, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    build, name, ns = line.split()
    name = re.sub(r"-\d+$", "", name)
    runs.setdefault((build, name), []).append(float(ns))

def q(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 4], statistics.median(xs), xs[(3 * n) // 4]

def show(label, a, b):
    r = [x / y for x, y in zip(a, b)]
    lo, med, hi = q(r)
    print(f"{label}: median ratio {med:.3f} (interquartile {lo:.3f}-{hi:.3f}, {len(r)} pairs); "
          f"best {min(a):.0f} ns against {min(b):.0f} ns, medians {statistics.median(a):.0f} against {statistics.median(b):.0f}")

over = "BenchmarkOpOverhead/timeline=off"
ar = "BenchmarkAllReduce/algo=ring/ranks=2/bytes=8B"
show("off, OpOverhead (with hooks / without)", runs[("with", over)], runs[("without", over)])
show("off, 8-byte allreduce on 2 ranks (with hooks / without)", runs[("with", ar)], runs[("without", ar)])
show("on, OpOverhead (timeline on / off)", runs[("with", "BenchmarkOpOverhead/timeline=on")], runs[("with", over)])
EOF
