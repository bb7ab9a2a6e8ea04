# shellcheck shell=bash
# image.sh: the VM image for test.sh (sourced): a Debian kernel that has
# rdma_rxe, and a base initramfs with busybox, the modules, rdma-core's
# userspace (the rxe provider, rdmacm-utils, perftest) and /init.
# The recipe follows ../../../shared/tools/rxe-vm (see its README).

IMAGE_VERSION=1 # bump to rebuild cached images
TRIPLET=x86_64-linux-gnu
# Loaded in this order, with their dependencies (modprobe --show-depends).
MODULES=(crc32-pclmul crc32_generic virtio_pci virtio_net rdma_rxe rdma_ucm ib_umad)
TOOLS=(ibv_devices ibv_devinfo rdma_client rdma_server rping ib_write_bw ib_read_bw
       ib_send_bw ib_write_lat rdma)

# stage ROOT HOSTPATH: copy a file (dereferenced) to the same path on the
# merged-/usr layout of ROOT.
stage() {
  local root=$1 src=$2 dst
  dst="$(readlink -m "$(dirname "$src")")/$(basename "$src")"
  case "$dst" in /bin/*|/sbin/*|/lib/*|/lib64/*) dst=/usr$dst ;; esac
  [ -e "$root$dst" ] && return 0
  mkdir -p "$root$(dirname "$dst")"
  cp -L --preserve=mode "$src" "$root$dst"
}

# stage_libs ROOT ELF: the shared-library closure of ELF.
stage_libs() {
  local root=$1 lib
  for lib in $(ldd "$2" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}'); do
    stage "$root" "$lib"
  done
}

kernel_pkg() {
  local cache=$1 p
  if [ -n "${GORUN_RXE_VM_KERNEL_PKG:-}" ]; then echo "$GORUN_RXE_VM_KERNEL_PKG"; return; fi
  if [ -s "$cache/kernel-pkg" ]; then cat "$cache/kernel-pkg"; return; fi
  p=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
  [ -n "$p" ] || return 1
  echo "$p" > "$cache/kernel-pkg"
  echo "$p"
}

# ensure_image CACHE: prints the directory holding vmlinux and base.cpio.gz,
# building it on first use.
ensure_image() {
  local cache=$1 kpkg dir work kver mod line ko f t off
  kpkg=$(kernel_pkg "$cache") || { echo "rxe-vm: cannot resolve linux-image-amd64" >&2; return 1; }
  dir=$cache/$kpkg
  if [ -f "$dir/stamp" ] && [ "$(cat "$dir/stamp")" = "$IMAGE_VERSION" ]; then echo "$dir"; return 0; fi
  echo "rxe-vm: building the image in $dir" >&2
  work=$(mktemp -d /tmp/gorun-rxe-img.XXXXXX)
  # shellcheck disable=SC2064
  trap "rm -rf '$work'" RETURN
  ( cd "$work" && apt-get download "$kpkg" >/dev/null 2>&1 ) ||
    { echo "rxe-vm: apt-get download $kpkg failed" >&2; return 1; }
  dpkg-deb -x "$work/${kpkg}"_*.deb "$work/k"
  kver=$(ls "$work/k/lib/modules" | head -n1)
  depmod -b "$work/k" "$kver"

  local root=$work/root mdir
  mkdir -p "$root"/{usr/bin,usr/sbin,usr/lib/$TRIPLET,usr/lib64,proc,sys,dev,run,tmp,root,etc}
  ln -s usr/bin "$root/bin"; ln -s usr/sbin "$root/sbin"
  ln -s usr/lib "$root/lib"; ln -s usr/lib64 "$root/lib64"
  chmod 1777 "$root/tmp"
  mdir=$root/usr/lib/modules/rxe-vm
  mkdir -p "$mdir"; : > "$mdir/order"
  for mod in "${MODULES[@]}"; do
    while read -r line; do
      case "$line" in
        insmod\ *) ko=$(awk '{print $2}' <<<"$line"); f=$(basename "$ko")
                   if [ ! -e "$mdir/$f" ]; then cp "$ko" "$mdir/$f"; echo "$f" >> "$mdir/order"; fi ;;
      esac
    done < <(modprobe -d "$work/k" -S "$kver" --show-depends "$mod" 2>/dev/null || true)
  done
  grep -q '^rdma_rxe.ko' "$mdir/order" || { echo "rxe-vm: kernel $kver has no rdma_rxe" >&2; return 1; }

  cp /bin/busybox "$root/usr/bin/busybox"; ln -s busybox "$root/usr/bin/sh"
  for t in "${TOOLS[@]}"; do
    f=$(command -v "$t") || { echo "rxe-vm: $t not found" >&2; return 1; }
    stage "$root" "$f"; stage_libs "$root" "$f"
  done
  for f in /usr/lib/$TRIPLET/libibverbs/librxe-rdmav*.so; do stage "$root" "$f"; stage_libs "$root" "$f"; done
  stage "$root" /etc/libibverbs.d/rxe.driver
  for f in /lib/$TRIPLET/libnss_files.so.2 /lib/$TRIPLET/libgcc_s.so.1; do
    [ -f "$f" ] && stage "$root" "$f"
  done
  printf 'root:x:0:0:root:/root:/bin/sh\n' > "$root/etc/passwd"
  printf 'root:x:0:\n' > "$root/etc/group"
  printf '127.0.0.1 localhost\n10.0.2.15 rxevm\n' > "$root/etc/hosts"
  printf 'hosts: files\n' > "$root/etc/nsswitch.conf"
  cp "$HERE/init.sh" "$root/init"; chmod 755 "$root/init"

  mkdir -p "$dir"
  ( cd "$root" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc --quiet ) | gzip -1 > "$dir/base.cpio.gz"
  # The per-run overlay (uncompressed cpio) is appended; the kernel finds it
  # only if it starts 4-byte aligned, so pad.
  truncate -s $(( ( $(stat -c %s "$dir/base.cpio.gz") + 511 ) / 512 * 512 )) "$dir/base.cpio.gz"
  # PVH boot of the uncompressed vmlinux skips the slow in-guest xz under TCG.
  off=$(grep -abo $'\xfd7zXZ\x00' "$work/k/boot/vmlinuz-$kver" | head -n1 | cut -d: -f1)
  [ -n "$off" ] || { echo "rxe-vm: vmlinuz-$kver is not xz-compressed" >&2; return 1; }
  tail -c +$((off + 1)) "$work/k/boot/vmlinuz-$kver" | xz -dcq > "$dir/vmlinux" 2>/dev/null || true
  [ "$(head -c 4 "$dir/vmlinux" | od -An -c | tr -d ' ')" = '177ELF' ] ||
    { echo "rxe-vm: could not extract vmlinux" >&2; return 1; }
  echo "$kver" > "$dir/kver"
  echo "$IMAGE_VERSION" > "$dir/stamp"
  echo "$dir"
}
