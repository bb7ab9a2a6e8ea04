#!/usr/bin/env bash
# scripts/rxe-vm/test386.sh: run gorun's pure-Go tests as 32-bit x86 binaries
# (GOARCH=386, CGO_ENABLED=0) inside the rxe VM, for hosts whose kernel cannot
# exec them ("exec format error": no IA32 emulation). The VM's Debian kernel
# has it.
#
#   scripts/rxe-vm/test386.sh [-run REGEX] [-skip REGEX] [-v] [-short] [-count N] [-arch amd64] [-env NAME=VALUE] [PKG...]
#
# PKG defaults to ./comm/ ./collectives/... ./transport/... ./bootstrap/
# ./internal/...; packages without tests are left out. The tracked source tree
# is copied into the VM at /src and each binary runs in its package's
# directory, as go test does, so testdata and sibling files are found. Tests
# that re-run their own binary as ranks work as on the host. There is no
# -race: the race detector does not support linux/386. -arch amd64 runs the
# same tests as 64-bit binaries: a control for failures that may come from
# the VM's slowness (TCG) rather than from 32 bits. -env exports a variable
# to the tests (repeatable).
# Exit status: non-zero if any package failed; 0 with "SKIP: reason" when the
# VM cannot be had. Per package the guest prints "=== PKG exit=N (secs)".
#
# Under TCG on a loaded 2-core host comm's tests take about 40 minutes and
# collectives' cost-point fits (skipped by -short) over an hour: pick tests.
#
# Environment: GORUN_RXE_VM_CACHE as test.sh; this script installs nothing
# (run test.sh once as root for qemu and the image's packages);
# GORUN_RXE_VM_TIMEOUT (default 1800) bounds the VM run in seconds;
# GORUN_RXE_VM_MEM (MiB, default 3072) and GORUN_RXE_VM_SMP (default 2) size
# the VM; TMPDIR (default /tmp) holds the run's files.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
CACHE=${GORUN_RXE_VM_CACHE:-${HOME:-/root}/.cache/gorun-rxe-vm}
TIMEOUT=${GORUN_RXE_VM_TIMEOUT:-1800}
export PATH=$PATH:/usr/local/go/bin:/usr/sbin:/sbin

ARGS=() PKGS=() ARCH=386 ENVS=()
while [ $# -gt 0 ]; do
  case "$1" in
    -run|-skip|-count) ARGS+=("-test.${1#-}=$2"); shift 2 ;;
    -v|-short) ARGS+=("-test.${1#-}"); shift ;;
    -arch) ARCH=$2; shift 2 ;;
    -env) ENVS+=("$2"); shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "test386.sh: unknown argument $1" >&2; exit 2 ;;
    *) PKGS+=("$1"); shift ;;
  esac
done
[ ${#PKGS[@]} -gt 0 ] || PKGS=(./comm/ ./collectives/... ./transport/... ./bootstrap/ ./internal/...)
skip() { echo "SKIP: $*"; exit 0; }
note() { echo "test386: $*" >&2; }

[ "$(uname -s)/$(uname -m)" = Linux/x86_64 ] || skip "needs Linux on x86_64"
command -v go >/dev/null || skip "no Go toolchain"
command -v qemu-system-x86_64 >/dev/null || skip "no qemu-system-x86_64 (run scripts/rxe-vm/test.sh once as root)"

# shellcheck source=scripts/rxe-vm/image.sh
. "$HERE/image.sh"
mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9
KDIR=$(ensure_image "$CACHE") || skip "cannot build the VM image (see the messages above)"
flock -u 9

RUN=$(mktemp -d "${TMPDIR:-/tmp}/gorun-386-vm.XXXXXX")
trap 'rm -rf "$RUN"' EXIT
mkdir -p "$RUN/ov/src" "$RUN/ov/opt/gorun386" "$RUN/ov/rxe-vm"
cd "$ROOT"
git ls-files -z | cpio --null -pdm --quiet "$RUN/ov/src"
list=()
while read -r imp dir; do
  rel=${dir#"$ROOT"/}
  name=$(echo "$rel" | tr / _)
  GOARCH=$ARCH CGO_ENABLED=0 go test -c -o "$RUN/ov/opt/gorun386/$name.test" "$imp" ||
    { echo "test386: building $imp for $ARCH failed"; exit 1; }
  list+=("$rel")
done < <(GOARCH=$ARCH CGO_ENABLED=0 go list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}} {{.Dir}}{{end}}' "${PKGS[@]}")
note "built ${#list[@]} $ARCH test binaries"

# The VM's /init runs /rxe-vm/guest.sh and powers off with its status.
{
  echo '#!/bin/sh'
  echo "set -- $(printf '%q ' -test.timeout=$((TIMEOUT - 60))s "${ARGS[@]}")"
  echo "arch=$ARCH"
  for e in "${ENVS[@]}"; do echo "export $(printf '%q' "$e")"; done
  echo 'rc=0'
  echo "for rel in ${list[*]}; do"
  cat <<'EOF'
  t=/opt/gorun386/$(echo "$rel" | tr / _).test
  s=$(cut -d' ' -f1 /proc/uptime)
  echo "=== $rel ($arch) $*"
  ( cd "/src/$rel" && "$t" "$@" )
  r=$?
  echo "=== $rel exit=$r ($(awk -v a="$s" -v b="$(cut -d' ' -f1 /proc/uptime)" 'BEGIN{printf "%.1f", b-a}')s)"
  [ $r = 0 ] || rc=1
done
exit $rc
EOF
} > "$RUN/ov/rxe-vm/guest.sh"
( cd "$RUN/ov" && find . -mindepth 1 -print0 | LC_ALL=C sort -z | cpio --null -o -H newc --quiet ) > "$RUN/overlay.cpio"
cat "$KDIR/base.cpio.gz" "$RUN/overlay.cpio" > "$RUN/initrd"

QEMU=(qemu-system-x86_64 -nodefaults -no-user-config -display none -no-reboot
      -m "${GORUN_RXE_VM_MEM:-3072}" -smp "${GORUN_RXE_VM_SMP:-2}"
      -kernel "$KDIR/vmlinux" -initrd "$RUN/initrd"
      -append "console=ttyS0 panic=-1 rdinit=/init quiet loglevel=3"
      -serial stdio -monitor none -netdev user,id=n0 -device virtio-net-pci,netdev=n0
      -accel tcg,thread=multi -cpu max)
set +e
timeout --foreground -k 5 "$TIMEOUT" "${QEMU[@]}" </dev/null 2>&1 | sed -u 's/\r$//' | tee "$RUN/console.log"
QRC=${PIPESTATUS[0]}
set -e
[ "$QRC" != 124 ] || { echo "test386: FAIL: the VM run hit the ${TIMEOUT}s timeout"; exit 1; }
ST=$(grep -a '^GORUN-RXE-VM-EXIT=' "$RUN/console.log" | tail -n1 | cut -d= -f2 | tr -cd 0-9 || true)
[ -n "$ST" ] || { echo "test386: FAIL: the VM stopped without a status (qemu rc=$QRC)"; exit 1; }
if [ "$ST" = 0 ]; then echo "test386: PASS"; else echo "test386: FAIL (status $ST)"; fi
exit "$ST"
