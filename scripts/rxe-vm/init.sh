#!/bin/sh
# /init of the rxe VM: modules, network, rxe0 on eth0, then /rxe-vm/guest.sh.
export PATH=/usr/bin:/usr/sbin HOME=/root
/usr/bin/busybox --install -s /usr/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs tmpfs /run
hostname rxevm
die() { echo "rxe-vm: setup failed: $*"; echo "GORUN-RXE-VM-EXIT=125"; poweroff -f; sleep 5; }
while read -r m; do insmod "/usr/lib/modules/rxe-vm/$m" 2>/dev/null || echo "rxe-vm: insmod $m failed"; done \
  < /usr/lib/modules/rxe-vm/order
ip link set lo up
i=0; while [ ! -e /sys/class/net/eth0 ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done
ip link set eth0 up || die "no eth0"
ip addr add 10.0.2.15/24 dev eth0
ip route add default via 10.0.2.2
export RXE_VM_IP=10.0.2.15
rdma link add rxe0 type rxe netdev eth0 || die "rdma link add rxe0"
i=0; while [ ! -e /dev/infiniband/uverbs0 ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done
[ -e /dev/infiniband/uverbs0 ] || die "no /dev/infiniband/uverbs0"
# wait for the RoCE v2 GID derived from the IPv4 address
i=0; while [ $i -lt 50 ]; do
  grep -q 'ffff:0a00:020f' /sys/class/infiniband/rxe0/ports/1/gids/* 2>/dev/null && break
  sleep 0.1; i=$((i+1))
done
ulimit -l unlimited
[ -f /rxe-vm/env ] && . /rxe-vm/env
cd /tmp
sh /rxe-vm/guest.sh
echo "GORUN-RXE-VM-EXIT=$?"
sync
poweroff -f
sleep 10
