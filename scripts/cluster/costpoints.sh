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
#   scripts/cluster/costpoints.sh -local shm|tcp [-passes 5] [-lock FILE]
#        [-out collectives/cost_points_launch_PROVIDER.csv]
#   ... [-algos tree,hd]
#
# -algos measures only these allreduce algorithms' check points, without
# the fit set and the broadcasts: to measure one algorithm again after a
# change to it, and put its rows in place of its old ones.
#
# -hostlist measures on those hosts instead (a real cluster: gorun -H
# reaches them over ssh, and each sees this checkout's binaries at the
# same path), with no namespace cluster and no root.
#
# -local measures provider shm or tcp between ranks on this host, as a
# user's job runs: gorun -np N, one process per rank (comm's TestCostFit
# measures them with every rank in one process, where ranks wait as
# goroutines do). It measures comm's points for them: the fit set, and
# allreduce (ring, tree, rd, hd) at 2, 3 and 4 ranks, 8 B to 16 MiB, each
# point's calls back to back (allreduce_perf -batch) as TestCostFit times
# them: the model's broadcasts overlap their latency (Cost.Latency). The
# CSV then also records the vCPU placement before and after each run
# (bench/compare's pingpong probe: rtt_before_ns, rtt_after_ns; the host
# moves this machine's vCPUs between a near and a far placement), which
# collectives' TestCostPoints reads as it does TestCostFit's. No root.
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

passes=3 rate=2gbit hosts=4 lock="" out="" names="" local="" algos=""
while [ $# -gt 0 ]; do
  case $1 in
    -passes) passes=$2; shift 2 ;;
    -rate) rate=$2; shift 2 ;;
    -hosts) hosts=$2; shift 2 ;;
    -lock) lock=$2; shift 2 ;;
    -out) out=$2; shift 2 ;;
    -hostlist) names=${2//,/ }; shift 2 ;;
    -local) local=$2; shift 2 ;;
    -algos) algos=${2//,/ }; shift 2 ;;
    *) echo "costpoints: unknown argument $1" >&2; exit 2 ;;
  esac
done
if [ -n "$names" ]; then
  set -- $names
  hosts=$#
fi
case $local in
  "") provider=net out=${out:-collectives/cost_points_net.csv} ;;
  # Not cost_points_net.csv, which one provider's points would replace.
  shm | tcp) provider=$local hosts=4 out=${out:-collectives/cost_points_launch_$local.csv} ;;
  *) echo "costpoints: -local takes shm or tcp, not $local" >&2; exit 2 ;;
esac
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
if [ -n "$local" ]; then
  cc -O2 -pthread -o "$work/pingpong" "$repo/bench/compare/progs/pingpong.c"
elif [ -z "$names" ]; then
  dir=$("$here/cluster.sh" up -n "$hosts" -rate "$rate" -prefix cost)
  names=$(for i in $(seq 1 "$hosts"); do echo "cost$i"; done)
fi

# hostlist N is -H for one rank on each of the first N hosts.
hostlist() {
  local l="" h
  for h in $(echo $names | tr ' ' '\n' | head -n "$1"); do l="$l${l:+,}$h:1"; done
  echo "$l"
}

# rtt prints the placement probe's round trip in ns (-local), or nothing.
rtt() {
  if [ -n "$local" ]; then "$work/pingpong" | awk '{printf ",%.0f", $2}'; fi
}

# run SET PASS COLL ALGO N WARM ITERS SIZES appends one pass of these
# points to the CSV.
run() {
  local set=$1 pass=$2 coll=$3 algo=$4 n=$5 warm=$6 iters=$7 sizes=$8 force=() where=()
  if [ "$coll" = allreduce ]; then force=(-a "$algo"); fi
  if [ -z "$local" ]; then where=(-H "$(hostlist "$n")"); else force+=(-batch); fi
  local table before after
  before=$(rtt)
  table=$(env ${local:+GORUN_TRANSPORT=$local} GORUN_ALGO="$coll:$algo" "$work/gorun" -np "$n" "${where[@]}" --tag-output=false \
    "$work/allreduce_perf" -coll "$coll" "${force[@]}" -w "$warm" -n "$iters" -d float32 -o sum -c 1 -sizes "$sizes")
  after=$(rtt)
  echo "$table" | awk -v set="$set" -v pass="$pass" -v coll="$coll" -v algo="$algo" -v n="$n" -v iters="$iters" \
    -v provider="$provider" -v rtt="$before$after" '
    /^ +[0-9]/ {
      if ($8 != 0 || $12 != 0) { print "costpoints: wrong results: " $0 > "/dev/stderr"; exit 1 }
      lo = $5 < $9 ? $5 : $9; hi = $5 < $9 ? $9 : $5
      printf "%s,%d,%s,%s,%s,%d,%d,0,%d,%.4g,%.4g,%.3g%s\n", set, pass, provider, coll, algo, n, $1, iters, lo/1e6, (lo+hi)/2e6, hi/lo, rtt
      rows++
    }
    END { if (rows == 0) { print "costpoints: no rows" > "/dev/stderr"; exit 1 } }' >>"$out"
}

# pass P measures every point once: small sizes in many calls, large in few.
pass() {
  local p=$1 n a
  if [ -z "$algos" ]; then
    run fit "$p" broadcast tree 2 20 200 8,4K,64K
    run fit "$p" broadcast tree 2 2 10 256K,1M,4M
    run fit "$p" allreduce rd 2 2 10 256K,1M,4M
  fi
  for n in $(seq 2 "$hosts"); do
    for a in ${algos:-ring tree rd hd}; do
      run check "$p" allreduce $a "$n" 20 200 8,4K,64K
      run check "$p" allreduce $a "$n" 2 8 1M,16M
    done
    if [ -n "$local" ] || [ -n "$algos" ]; then continue; fi # comm's points for shm and tcp: allreduce alone
    for a in tree chain; do
      run check "$p" broadcast $a "$n" 20 200 8,4K,64K
      run check "$p" broadcast $a "$n" 2 8 1M,16M
    done
  done
}

head=set,round,provider,collective,algo,ranks,bytes,window,calls,min_s,median_s,p90_p10
if [ -n "$local" ]; then head=$head,rtt_before_ns,rtt_after_ns; fi
echo "$head" >"$out"
for p in $(seq 0 $((passes - 1))); do
  echo "costpoints: pass $p, $(date -u +%H:%M:%S), load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
  if [ -n "$lock" ]; then
    flock "$lock" bash -c "set -Eeuo pipefail; $(declare -f hostlist rtt run pass); work='$work' out='$out' hosts='$hosts' names='$(echo $names)' local='$local' provider='$provider' algos='$algos'; pass $p"
  else
    pass "$p"
  fi
done
echo "costpoints: done, $(date -u +%H:%M:%S), load $(cut -d' ' -f1-3 /proc/loadavg); $out" >&2
