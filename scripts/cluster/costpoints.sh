#!/usr/bin/env bash
# costpoints.sh measures the points the cost model between hosts ("net",
# collectives/cost_net.go) is fitted on and checked against, on the
# namespace cluster (cluster.sh): one rank per host, started over ssh by
# gorun -H as bench/compare's cluster scenarios are, examples/allreduce_perf
# timing each call after a barrier.
#
#   sudo scripts/cluster/costpoints.sh [-passes 3] [-rate 2gbit] [-hosts 4]
#        [-lock FILE] [-out collectives/cost_points_net.csv]
#   scripts/cluster/costpoints.sh -hostlist a,b,c,d [-passes 3] [-out FILE]
#
# -hostlist measures on those hosts instead (a real cluster: gorun -H
# reaches them over ssh, and each sees this checkout's binaries at the
# same path), with no namespace cluster and no root.
#
# The points are those of comm's TestCostFit: the fit set (2 ranks: a
# broadcast by the tree of 8 B to 4 MiB, an allreduce by recursive doubling
# of 256 KiB to 4 MiB), then allreduce (ring, tree, rd, hd) and broadcast
# (tree, chain) at 2, 3 and 4 hosts, 8 B to 16 MiB. Every point is
# measured once in each pass over the whole set; a pass's figure for a
# point is the faster of allreduce_perf's out-of-place and in-place rows
# (each the mean of its calls), and collectives' TestCostPointsNet keeps
# the fastest pass. The CSV has TestCostFit's columns (window 0: not
# recorded; the model between hosts predicts without it). With -lock,
# each pass holds flock on FILE (a shared machine's benchmark lock); the
# cluster comes up before the first pass and goes down on exit, whatever
# happens. Needs root (network namespaces), as cluster.sh does, and Go.
set -Eeuo pipefail

passes=3 rate=2gbit hosts=4 lock="" out=collectives/cost_points_net.csv names=""
while [ $# -gt 0 ]; do
  case $1 in
    -passes) passes=$2; shift 2 ;;
    -rate) rate=$2; shift 2 ;;
    -hosts) hosts=$2; shift 2 ;;
    -lock) lock=$2; shift 2 ;;
    -out) out=$2; shift 2 ;;
    -hostlist) names=${2//,/ }; shift 2 ;;
    *) echo "costpoints: unknown argument $1" >&2; exit 2 ;;
  esac
done
if [ -n "$names" ]; then
  set -- $names
  hosts=$#
fi
[ "$hosts" -ge 2 ] || { echo "costpoints: -hosts must be at least 2" >&2; exit 2; }

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
if [ -n "$names" ]; then
  work=$(mktemp -d "$repo/.costpoints.XXXXXX") # a path the hosts share
else
  work=$(mktemp -d)
fi
dir=""
cleanup() {
  if [ -n "$dir" ]; then "$here/cluster.sh" down "$dir" >/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

(cd "$repo" && go build -o "$work/gorun" ./cmd/gorun && go build -o "$work/allreduce_perf" ./examples/allreduce_perf)
if [ -z "$names" ]; then
  dir=$("$here/cluster.sh" up -n "$hosts" -rate "$rate" -prefix cost)
  names=$(for i in $(seq 1 "$hosts"); do echo "cost$i"; done)
fi

# hostlist N is -H for one rank on each of the first N hosts.
hostlist() {
  local l="" h
  for h in $(echo $names | tr ' ' '\n' | head -n "$1"); do l="$l${l:+,}$h:1"; done
  echo "$l"
}

# run SET PASS COLL ALGO N WARM ITERS SIZES appends one pass of these
# points to the CSV.
run() {
  local set=$1 pass=$2 coll=$3 algo=$4 n=$5 warm=$6 iters=$7 sizes=$8 force=()
  if [ "$coll" = allreduce ]; then force=(-a "$algo"); fi
  local table
  table=$(GORUN_ALGO="$coll:$algo" "$work/gorun" -np "$n" -H "$(hostlist "$n")" --tag-output=false \
    "$work/allreduce_perf" -coll "$coll" "${force[@]}" -w "$warm" -n "$iters" -d float32 -o sum -c 1 -sizes "$sizes")
  echo "$table" | awk -v set="$set" -v pass="$pass" -v coll="$coll" -v algo="$algo" -v n="$n" -v iters="$iters" '
    /^ +[0-9]/ {
      if ($8 != 0 || $12 != 0) { print "costpoints: wrong results: " $0 > "/dev/stderr"; exit 1 }
      lo = $5 < $9 ? $5 : $9; hi = $5 < $9 ? $9 : $5
      printf "%s,%d,net,%s,%s,%d,%d,0,%d,%.4g,%.4g,%.3g\n", set, pass, coll, algo, n, $1, iters, lo/1e6, (lo+hi)/2e6, hi/lo
      rows++
    }
    END { if (rows == 0) { print "costpoints: no rows" > "/dev/stderr"; exit 1 } }' >>"$out"
}

# pass P measures every point once: small sizes in many calls, large in few.
pass() {
  local p=$1 n a
  run fit "$p" broadcast tree 2 20 200 8,4K,64K
  run fit "$p" broadcast tree 2 2 10 256K,1M,4M
  run fit "$p" allreduce rd 2 2 10 256K,1M,4M
  for n in $(seq 2 "$hosts"); do
    for a in ring tree rd hd; do
      run check "$p" allreduce $a "$n" 20 200 8,4K,64K
      run check "$p" allreduce $a "$n" 2 8 1M,16M
    done
    for a in tree chain; do
      run check "$p" broadcast $a "$n" 20 200 8,4K,64K
      run check "$p" broadcast $a "$n" 2 8 1M,16M
    done
  done
}

echo "set,round,provider,collective,algo,ranks,bytes,window,calls,min_s,median_s,p90_p10" >"$out"
for p in $(seq 0 $((passes - 1))); do
  echo "costpoints: pass $p, $(date -u +%H:%M:%S), load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
  if [ -n "$lock" ]; then
    flock "$lock" bash -c "set -Eeuo pipefail; $(declare -f hostlist run pass); work='$work' out='$out' hosts='$hosts' names='$(echo $names)'; pass $p"
  else
    pass "$p"
  fi
done
echo "costpoints: done, $(date -u +%H:%M:%S), load $(cut -d' ' -f1-3 /proc/loadavg); $out" >&2
