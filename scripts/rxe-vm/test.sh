#!/usr/bin/env bash
# scripts/rxe-vm/test.sh: run gorun's RDMA tests against real verbs (the kernel's
# soft-RoCE driver, rdma_rxe) inside a throw-away qemu VM.
#
#   scripts/rxe-vm/test.sh [-run REGEX] [-v] [-long] [-bench] [-race]
#
# It builds the test binaries with cgo and -tags rdma, boots the Debian kernel
# with rdma_rxe (TCG; KVM with GORUN_RXE_VM_ACCEL=kvm), binds rxe0 to the
# VM's virtio NIC and runs every binary inside, all ranks talking over rxe0.
# By default the tests run with -test.short (TCG moves ~25 MB/s, so the
# 64 MiB cases take minutes); -long runs them all. -bench also runs the
# bandwidth comparison with ib_write_bw and the ping-pong latency of a
# shared CQ's Poll, WaitComp and GetRecvComp (about 35 s more) and prints
# their BANDWIDTH and LATENCY lines. -race builds the binaries with the race detector (slower).
# Exit status: the tests' (non-zero on failure); 0 with "SKIP: reason" when
# qemu, the kernel or the packages cannot be had.
#
# Environment: GORUN_RXE_VM_CACHE (default ~/.cache/gorun-rxe-vm) holds the
# kernel and the base initramfs; GORUN_RXE_VM_NO_APT=1 never runs apt-get;
# GORUN_RXE_VM_TIMEOUT (default 480) bounds the VM run in seconds;
# GORUN_RXE_VM_KERNEL_PKG pins the kernel package; GORUN_RXE_VM_COMM_RUN is
# the -run filter of comm's tests over verbs (empty: skip comm).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
CACHE=${GORUN_RXE_VM_CACHE:-${HOME:-/root}/.cache/gorun-rxe-vm}
TIMEOUT=${GORUN_RXE_VM_TIMEOUT:-480}
export PATH=$PATH:/usr/local/go/bin:/usr/sbin:/sbin

RUN_RE= VERBOSE= BENCH=0 SHORT=1 RACE=
while [ $# -gt 0 ]; do
  case "$1" in
    -run) RUN_RE=$2; shift 2 ;;
    -v) VERBOSE=-test.v; shift ;;
    -bench) BENCH=1; shift ;;
    -race) RACE=-race; shift ;;
    -long) SHORT=0; TIMEOUT=${GORUN_RXE_VM_TIMEOUT:-900}; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "test.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

# comm tests that run over verbs by default (GORUN_RXE_VM_COMM_RUN overrides;
# empty: none). Left out: TestCollectives* (hundreds of worlds: more queue
# pairs than the VM's memory holds), TestTimeoutNamesPeer (its 300 ms
# timeout also bounds connecting 4 ranks, slower than that under TCG),
# TestInvalidArguments (rank 3 may finish its broadcast before rank 1's
# abort arrives), tests that pick their own transports.
DEFAULT_COMM_RUN='TestMismatch|TestAbortWakesPeers|TestContextCancel|TestSendRecvTags|TestRequests|TestSplitAndDup|TestDeterministic|TestOperationNeedingClosedPeerFails|TestAllReduceAllocs'
skip() { echo "SKIP: $*"; exit 0; }
note() { echo "rxe-vm: $*" >&2; }
T0=$(date +%s.%N)
elapsed() { awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}'; }

[ "$(uname -s)/$(uname -m)" = Linux/x86_64 ] || skip "needs Linux on x86_64"
command -v go >/dev/null || skip "no Go toolchain"

# ---------------------------------------------------------------- packages
PKGS=(qemu-system-x86 busybox-static cpio kmod iproute2 rdma-core ibverbs-providers
      ibverbs-utils libibverbs-dev librdmacm-dev rdmacm-utils perftest xz-utils)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ -n "${GORUN_RXE_VM_NO_APT:-}" ] || [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    skip "missing packages: ${missing[*]} (install them or run as root on Debian/Ubuntu)"
  fi
  note "installing ${missing[*]}"
  { apt-get -o DPkg::Lock::Timeout=300 update -qq &&
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq \
      --no-install-recommends "${missing[@]}"; } >&2 || skip "apt-get install ${missing[*]} failed"
fi

# ---------------------------------------------------------------- kernel + base initramfs
# shellcheck source=scripts/rxe-vm/image.sh
. "$HERE/image.sh"
mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9
KDIR=$(ensure_image "$CACHE") || skip "cannot build the VM image (see the messages above)"
flock -u 9

# ---------------------------------------------------------------- test binaries
RUN=$(mktemp -d /tmp/gorun-rxe-vm.XXXXXX)
trap 'rm -rf "$RUN"' EXIT
mkdir -p "$RUN/ov/opt/gorun" "$RUN/ov/rxe-vm"
cd "$ROOT"
# Packages whose tests run against verbs in the VM: the provider's own, and
# comm's (GORUN_TRANSPORT=verbs makes comm.NewLocal connect its ranks over
# rxe0) restricted to $GORUN_RXE_VM_COMM_RUN: the full matrix builds
# hundreds of worlds, too many queue pairs for the VM.
TESTPKGS=(./transport/rdma/verbs)
COMM_RUN=${GORUN_RXE_VM_COMM_RUN-$DEFAULT_COMM_RUN}
if [ -n "$COMM_RUN" ] && [ -d ./comm ]; then TESTPKGS+=(./comm); fi
for p in "${TESTPKGS[@]}"; do
  name=$(basename "$p")
  CGO_ENABLED=1 go test -c $RACE -tags rdma -o "$RUN/ov/opt/gorun/$name.test" "$p" ||
    { echo "rxe-vm: building $p with -tags rdma failed"; exit 1; }
done
note "built ${#TESTPKGS[@]} test binaries in $(elapsed)s"
for f in "$RUN"/ov/opt/gorun/*.test; do stage_libs "$RUN/ov" "$f"; done
cp "$HERE/guest.sh" "$RUN/ov/rxe-vm/guest.sh"
{
  echo "export GORUN_TEST_RUN=$(printf '%q' "$RUN_RE")"
  echo "export GORUN_TEST_V=$VERBOSE GORUN_TEST_BENCH=$BENCH GORUN_TEST_SHORT=$SHORT"
  echo "export GORUN_TEST_TIMEOUT=$((TIMEOUT - 30))s"
  echo "export GORUN_COMM_RUN=$(printf '%q' "$COMM_RUN")"
} > "$RUN/ov/rxe-vm/env"
( cd "$RUN/ov" && find . -mindepth 1 -print0 | LC_ALL=C sort -z | cpio --null -o -H newc --quiet ) > "$RUN/overlay.cpio"
cat "$KDIR/base.cpio.gz" "$RUN/overlay.cpio" > "$RUN/initrd"

# ---------------------------------------------------------------- boot
QEMU=(qemu-system-x86_64 -nodefaults -no-user-config -display none -no-reboot
      -m 2048 -smp 2 -kernel "$KDIR/vmlinux" -initrd "$RUN/initrd"
      -append "console=ttyS0 panic=-1 rdinit=/init quiet loglevel=3"
      -serial stdio -monitor none
      -netdev user,id=n0 -device virtio-net-pci,netdev=n0)
if [ "${GORUN_RXE_VM_ACCEL:-tcg}" = kvm ]; then
  QEMU+=(-accel kvm -cpu host,-arch-capabilities)
else
  QEMU+=(-accel tcg,thread=multi -cpu max)
fi
B0=$(date +%s.%N)
set +e
timeout --foreground -k 5 "$TIMEOUT" "${QEMU[@]}" </dev/null 2>&1 | sed -u 's/\r$//' | tee "$RUN/console.log"
QRC=${PIPESTATUS[0]}
set -e
note "VM wall time $(awk -v a="$B0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')s, total $(elapsed)s"
[ "$QRC" != 124 ] || { echo "rxe-vm: FAIL: the VM run hit the ${TIMEOUT}s timeout"; exit 1; }
ST=$(grep -a '^GORUN-RXE-VM-EXIT=' "$RUN/console.log" | tail -n1 | cut -d= -f2 | tr -cd 0-9 || true)
[ -n "$ST" ] || { echo "rxe-vm: FAIL: the VM stopped without a status (qemu rc=$QRC)"; exit 1; }
if [ "$ST" = 0 ]; then echo "rxe-vm: PASS"; else echo "rxe-vm: FAIL (status $ST)"; fi
exit "$ST"
