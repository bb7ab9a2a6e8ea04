#!/usr/bin/env bash
# Builds the C ABI: DIR/libgorun.so and DIR/gorun.pc (DIR: the first
# argument, default build/capi, which .gitignore covers). The pkg-config
# file adds an rpath, so a program linked with
#   cc prog.c $(pkg-config --cflags --libs DIR/gorun.pc)
# finds libgorun.so at run time without LD_LIBRARY_PATH.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/build/capi}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$root"
go build -buildmode=c-shared -ldflags=-extldflags=-Wl,-soname,libgorun.so -o "$out/libgorun.so" ./capi
rm -f "$out/libgorun.h" # cgo's header; the ABI is the hand-written include/gorun.h
version=$(git describe --tags --always --dirty 2>/dev/null || echo devel)
cat >"$out/gorun.pc" <<EOF
libdir=$out
includedir=$root/include

Name: gorun
Description: gorun collective communication runtime (C ABI)
Version: ${version#v}
Cflags: -I\${includedir}
Libs: -L\${libdir} -Wl,-rpath,\${libdir} -lgorun
EOF
echo "$out/libgorun.so"
echo "$out/gorun.pc"
