#!/bin/sh
# Chaos soak (RELIABILITY.md): examples/soak -elastic under
# gorun --elastic --max-restarts, with a random rank killed (SIGKILL) every
# few seconds; at the end, the recoveries and their times.
#
#   scripts/chaos-soak.sh [DURATION_S [NP [TRANSPORT]]]     defaults: 600 4 auto
#
# CHAOS_MODE=freeze stops the rank (SIGSTOP) for CHAOS_HOLD seconds
# (default 1.5) instead; CHAOS_MODE=starve moves it for CHAOS_HOLD seconds
# (default 4) into a cgroup-v1 cpu group with a quota of 1 ms per second:
# alive and not stopped, but silent, as a rank starved of CPU (root only).
#
# Kills stop 30 s before the end, so the last restarted rank can rejoin.
# Exit status: gorun's (0: every step checked, every rank ended well).
set -eu
dur=${1:-600}
np=${2:-4}
tr=${3:-auto}
cd "$(dirname "$0")/.."
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/gorun" ./cmd/gorun
go build -o "$bin/soak" ./examples/soak
log=${CHAOS_LOG:-$bin/chaos.log}
"$bin/gorun" -np "$np" --transport "$tr" --elastic --max-restarts 10000 \
	"$bin/soak" -elastic -duration "${dur}s" >"$log" 2>&1 &
gpid=$!
kills=0
start=$(date +%s)
while kill -0 "$gpid" 2>/dev/null; do
	sleep "$(awk -v s="$(od -An -N2 -tu2 /dev/urandom)" 'BEGIN{printf "%.1f", 3 + (s % 30) / 10}')"
	now=$(date +%s)
	[ $((now - start)) -lt $((dur - 30)) ] || continue
	# gorun's children are the ranks (local launch).
	pids=$(pgrep -P "$gpid" -x soak || true)
	[ -n "$pids" ] || continue
	n=$(echo "$pids" | wc -l)
	pick=$(echo "$pids" | sed -n "$(( $(od -An -N2 -tu2 /dev/urandom) % n + 1 ))p")
	case ${CHAOS_MODE:-kill} in
	freeze)
		kill -STOP "$pick" 2>/dev/null || continue
		kills=$((kills + 1))
		echo "chaos: $(date -u +%T) stopped pid $pick (freeze $kills)" >>"$log.kills"
		sleep "${CHAOS_HOLD:-1.5}"
		kill -CONT "$pick" 2>/dev/null || true
		;;
	starve)
		cg=/sys/fs/cgroup/cpu/gorun-chaos-$$
		mkdir -p "$cg" && echo 1000000 >"$cg/cpu.cfs_period_us" && echo 1000 >"$cg/cpu.cfs_quota_us" || exit 2
		echo "$pick" >"$cg/cgroup.procs" 2>/dev/null || continue
		kills=$((kills + 1))
		echo "chaos: $(date -u +%T) starved pid $pick (starve $kills)" >>"$log.kills"
		sleep "${CHAOS_HOLD:-4}"
		for t in $(ls "/proc/$pick/task" 2>/dev/null); do echo "$t" >/sys/fs/cgroup/cpu/tasks 2>/dev/null; done
		rmdir "$cg" 2>/dev/null || true
		;;
	*)
		if kill -9 "$pick" 2>/dev/null; then
			kills=$((kills + 1))
			echo "chaos: $(date -u +%T) killed pid $pick (kill $kills)" >>"$log.kills"
		fi
		;;
	esac
done
set +e
wait "$gpid"
rc=$?
echo "chaos: gorun exited $rc after $kills ${CHAOS_MODE:-kill}s"
grep -c 'soak: recovery:' "$log" | sed 's/^/chaos: recovery lines (one per survivor per recovery): /'
grep -c 'rejoined as rank' "$log" | sed 's/^/chaos: rejoins: /'
grep -o 'first good step [0-9]* ms' "$log" | awk '{print $4}' | sort -n | awk '
	{ v[NR] = $1 } END { if (NR) printf "chaos: failure → first good step: n=%d median %d ms, min %d, max %d, p90 %d\n", NR, v[int((NR+1)/2)], v[1], v[NR], v[int(NR*0.9)+0] }'
grep -E 'WRONG|FAIL' "$log" | head -5
tail -n 8 "$log"
exit $rc
