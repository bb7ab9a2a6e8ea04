#!/usr/bin/env bash
# A cluster of H "hosts" on this machine, for tests, bench/compare and people.
#
# Each host is a network namespace plus a UTS namespace with its own
# hostname (so gorun and MPI see separate machines), joined by a veth pair to
# one bridge; both ends of each veth are shaped to RATE, as a full-duplex
# NIC would be, with a queue of QUEUE and (-prio 1) a priority class for
# control traffic (see shape). /etc/hosts gets the host names; a real sshd
# (Debian's openssh-server) runs in each host with keys made for the run,
# and a drop-in in /etc/ssh/ssh_config.d makes plain `ssh h1` use them, so
# `gorun -H h1:2,h2:2 ./prog` goes over real ssh. With -slurm, Debian's
# Slurm runs on it too: munged and slurmctld on this side of the bridge
# (slurmctld with a UTS namespace of its own), one slurmd in each host;
# export SLURM_CONF=DIR/slurm/slurm.conf to use it (srun, sbatch).
#
#   cluster.sh up [-n H] [-rate 2gbit] [-queue 20ms] [-prio 1] [-prefix h]
#                 [-owner PID] [-slurm]     prints DIR
#   cluster.sh down DIR|all|stale     removes everything a cluster made
#   cluster.sh exec HOST CMD...       runs CMD in HOST (a launch agent)
#   cluster.sh run [up options] -- CMD...   up, CMD with GORUN_CLUSTER=DIR, down
#
# State lives in /run/gorun-cluster/ID: hosts (name ip netns), keys,
# sshd configs, the owner pid. "down stale" removes clusters whose owner
# process is gone (a test killed before its cleanup ran); "up" does that
# first. Needs root, iproute2, tc, util-linux and openssh-server.
set -Eeuo pipefail

ROOT=/run/gorun-cluster
SELF=$(readlink -f "$0")

die() { echo "cluster: $*" >&2; exit 1; }

# locked CMD... runs CMD holding the cluster lock (edits of shared files).
locked() {
  mkdir -p "$ROOT"
  (flock 9; "$@") 9<"$ROOT"
}

hosts_remove() { # ID: drops this cluster's /etc/hosts lines
  # A new file renamed over the old one, so that a concurrent reader (ssh
  # resolving another cluster's host) never sees it empty; in place only
  # where /etc/hosts is a bind mount (a container's), which rename cannot
  # replace.
  local tmp=/etc/.hosts.gorun-cluster.$$
  grep -v " # gorun-cluster $1\$" /etc/hosts >"$tmp" || true
  chmod 644 "$tmp"
  if ! mv -f "$tmp" /etc/hosts 2>/dev/null; then
    cat "$tmp" >/etc/hosts
    rm -f "$tmp"
  fi
}

hosts_add() { # FILE: appends its lines to /etc/hosts
  cat "$1" >>/etc/hosts
}

# shape DEV NETNS RATE QUEUE PRIO: DEV's egress limited to RATE with a queue
# of at most QUEUE (a time at RATE), as a NIC's would be. With PRIO=1 (the
# default) control traffic goes first, as a datacentre's switches do with
# DSCP: an htb whose control class (prio 0) takes packets marked CS6, CS7
# or EF (gorun's gossip is CS6) and small packets (<= 256 bytes: probes,
# pure TCP acknowledgements, SYNs), and whose bulk class takes the rest; the
# control class may use the whole rate, and the bulk class what it leaves.
# PRIO=0 is one tbf queue for everything: a probe waits behind QUEUE of
# bulk data or is dropped with it.
shape() {
  local dev=$1 ns=$2 rate=$3 queue=$4 prio=$5 n=()
  [ -n "$ns" ] && n=(-n "$ns")
  if [ "$prio" = 0 ]; then
    tc "${n[@]}" qdisc add dev "$dev" root tbf rate "$rate" burst 1mb latency "$queue"
    return
  fi
  local bps limit
  bps=$(tc_bits "$rate")
  limit=$((bps / 8 * $(tc_ms "$queue") / 1000))
  [ "$limit" -ge 65536 ] || limit=65536
  tc "${n[@]}" qdisc add dev "$dev" root handle 1: htb default 20
  tc "${n[@]}" class add dev "$dev" parent 1: classid 1:1 htb rate "$rate" ceil "$rate" burst 1mb cburst 1mb quantum 60000
  tc "${n[@]}" class add dev "$dev" parent 1:1 classid 1:10 htb rate $((bps / 20))bit ceil "$rate" burst 64kb cburst 64kb prio 0 quantum 60000
  tc "${n[@]}" class add dev "$dev" parent 1:1 classid 1:20 htb rate $((bps - bps / 20))bit ceil "$rate" burst 1mb cburst 1mb prio 1 quantum 60000
  tc "${n[@]}" qdisc add dev "$dev" parent 1:10 pfifo limit 1000
  tc "${n[@]}" qdisc add dev "$dev" parent 1:20 bfifo limit "$limit"
  # DSCP CS6 (0xc0), CS7 (0xe0), EF (0xb8): the TOS byte's top six bits.
  local tos
  for tos in 0xc0 0xe0 0xb8; do
    tc "${n[@]}" filter add dev "$dev" parent 1: protocol ip prio 1 u32 match ip dsfield $tos 0xfc flowid 1:10
  done
  # IPv4 total length at most 256 bytes.
  tc "${n[@]}" filter add dev "$dev" parent 1: protocol ip prio 2 u32 match u16 0x0000 0xff00 at 2 flowid 1:10
}

# tc_bits RATE: bits per second of a tc rate (2gbit, 500mbit, 100kbit).
tc_bits() {
  local r=${1,,}
  case $r in
    *gbit) echo $((${r%gbit} * 1000000000)) ;;
    *mbit) echo $((${r%mbit} * 1000000)) ;;
    *kbit) echo $((${r%kbit} * 1000)) ;;
    *bit) echo "${r%bit}" ;;
    *) die "rate $1: want a number with gbit, mbit, kbit or bit" ;;
  esac
}

# tc_ms TIME: milliseconds of 20ms, 1s.
tc_ms() {
  case $1 in
    *ms) echo "${1%ms}" ;;
    *s) echo $((${1%s} * 1000)) ;;
    *) die "queue $1: want ms or s" ;;
  esac
}

down() { # DIR
  local dir=$1 id name ip ns
  id=$(basename "$dir")
  [[ "$id" =~ ^[0-9]+$ ]] || die "down: $dir is not a cluster directory"
  if [ -f "$dir/hosts" ]; then
    while read -r name ip ns; do
      # Every process in the host: sshd, its sessions, ranks.
      for _ in 1 2 3; do
        pids=$(ip netns pids "$ns" 2>/dev/null || true)
        [ -z "$pids" ] && break
        kill -9 $pids 2>/dev/null || true
        sleep 0.1
      done
      ip netns del "$ns" 2>/dev/null || true
      umount "$dir/uts-$name" 2>/dev/null || true
    done <"$dir/hosts"
  fi
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^gorun-c$id-" || true); do
    ip netns del "$ns" 2>/dev/null || true
  done
  ip link del "grc$id" 2>/dev/null || true
  for pf in "$dir/slurm/slurmctld.pid" "$dir/munged.pid"; do
    if [ -f "$pf" ]; then kill -9 "$(cat "$pf")" 2>/dev/null || true; fi
  done
  locked hosts_remove "$id"
  rm -f "/etc/ssh/ssh_config.d/gorun-cluster-$id.conf"
  for f in "$dir"/uts-*; do umount "$f" 2>/dev/null || true; done
  rm -rf "$dir"
  rmdir "$ROOT" 2>/dev/null || true
}

# alive PID: the process exists and is not a zombie (where pid 1 does not
# reap, as in a container, a dead owner can stay a zombie for good).
alive() {
  local st
  st=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  st=${st##*) }
  case "$st" in Z*|X*) return 1 ;; esac
}

down_stale() {
  local d owner
  for d in "$ROOT"/[0-9]*; do
    [ -d "$d" ] || continue
    owner=$(cat "$d/owner" 2>/dev/null || echo 1)
    if [ "$owner" != 0 ] && ! alive "$owner"; then
      down "$d"
    fi
  done
}

up() {
  local n=2 rate=2gbit queue=20ms prio=1 prefix=h owner=0 slurm=
  while [ $# -gt 0 ]; do
    case $1 in
      -n) n=$2; shift 2 ;;
      -rate) rate=$2; shift 2 ;;
      -queue) queue=$2; shift 2 ;;
      -prio) prio=$2; shift 2 ;;
      -prefix) prefix=$2; shift 2 ;;
      -owner) owner=$2; shift 2 ;;
      -slurm) slurm=1; shift ;;
      *) die "up: unknown option $1" ;;
    esac
  done
  [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 16 ] || die "-n $n: want 1..16 hosts"
  [[ "$prio" =~ ^[01]$ ]] || die "-prio $prio: want 0 or 1"
  tc_bits "$rate" >/dev/null && tc_ms "$queue" >/dev/null
  [[ "$prefix" =~ ^[a-z][a-z0-9-]{0,20}$ ]] || die "-prefix $prefix: want a short lower-case name"
  [ "$(id -u)" = 0 ] || die "needs root"
  for c in ip tc unshare nsenter flock ssh-keygen; do
    command -v $c >/dev/null || die "missing $c"
  done
  [ -x /usr/sbin/sshd ] || die "missing /usr/sbin/sshd (apt-get install openssh-server)"
  if [ -n "$slurm" ]; then
    for c in munged slurmctld slurmd srun sbatch sinfo; do
      command -v $c >/dev/null || die "missing $c (apt-get install slurm-wlm munge)"
    done
  fi
  mkdir -p "$ROOT"
  down_stale

  # A free id: the directory is the claim.
  local id dir
  for id in $(seq 1 250); do
    mkdir -p "$ROOT" && mkdir "$ROOT/$id" 2>/dev/null && break
    id=
  done
  [ -n "$id" ] || die "no free cluster id in $ROOT"
  dir=$ROOT/$id
  echo "$owner" >"$dir/owner"
  # From here on a failure removes what was made.
  trap 'down "$dir"' ERR
  for i in $(seq 1 "$n"); do
    if grep -q "[[:space:]]$prefix$i\([[:space:]]\|\$\)" /etc/hosts; then
      echo "cluster: $prefix$i is already in /etc/hosts (another cluster? use -prefix)" >&2
      false
    fi
  done

  local net=10.213.$id br=grc$id
  ip link add "$br" type bridge
  ip addr add "$net.254/24" dev "$br"
  ip link set "$br" up

  ssh-keygen -q -t ed25519 -N '' -C "gorun-cluster-$id" -f "$dir/id_ed25519"
  cp "$dir/id_ed25519.pub" "$dir/authorized_keys"
  : >"$dir/known_hosts"
  : >"$dir/etc_hosts"
  local names=()
  for i in $(seq 1 "$n"); do
    local name=$prefix$i ip=$net.$i ns=gorun-c$id-$prefix$i
    local va=gc${id}v${i}a vb=gc${id}v${i}b hd=$dir/$name
    names+=("$name")
    echo "$name $ip $ns" >>"$dir/hosts"
    echo "$ip $name # gorun-cluster $id" >>"$dir/etc_hosts"
    ip netns add "$ns"
    ip link add "$va" type veth peer name "$vb"
    ip link set "$vb" netns "$ns"
    ip link set "$va" master "$br" up
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "$ip/24" dev "$vb"
    ip -n "$ns" link set "$vb" name eth0 up
    ip -n "$ns" route add default via "$net.254"
    # Both directions shaped, as a NIC's send and receive are.
    shape "$va" "" "$rate" "$queue" "$prio"
    shape eth0 "$ns" "$rate" "$queue" "$prio"
    # A persistent UTS namespace with the host's name.
    touch "$dir/uts-$name"
    unshare --uts="$dir/uts-$name" hostname "$name"

    mkdir -p "$hd" /run/sshd
    ssh-keygen -q -t ed25519 -N '' -C "$name" -f "$hd/ssh_host_ed25519_key"
    echo "$name,$ip $(cut -d' ' -f1,2 "$hd/ssh_host_ed25519_key.pub")" >>"$dir/known_hosts"
    cat >"$hd/sshd_config" <<EOF
ListenAddress $ip:22
HostKey $hd/ssh_host_ed25519_key
PidFile $hd/sshd.pid
AuthorizedKeysFile $dir/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PrintMotd no
MaxStartups 200
MaxSessions 200
LogLevel ERROR
EOF
    # sshd and its sessions get a mount namespace of their own, where
    # root's ~/.bashrc (which bash reads for a command ssh runs) is an empty
    # file, as on a fresh node: this machine's runs `pyenv rehash`, whose
    # lock file a session killed inside it (a test's stop, down's kill -9)
    # leaves behind, and every later login then waited 60 s for the lock.
    : >"$dir/bashrc"
    nsenter --net="/run/netns/$ns" --uts="$dir/uts-$name" unshare --mount --propagation private \
      sh -c 'rc=$(getent passwd root | cut -d: -f6)/.bashrc; if [ -f "$rc" ]; then mount --bind "$1" "$rc"; fi; exec /usr/sbin/sshd -f "$2" -E "$3"' \
      sh "$dir/bashrc" "$hd/sshd_config" "$hd/sshd.log"
  done
  locked hosts_add "$dir/etc_hosts"
  cat >"/etc/ssh/ssh_config.d/gorun-cluster-$id.conf" <<EOF
# gorun cluster $id ($dir); removed by "cluster.sh down".
Host ${names[*]}
  IdentityFile $dir/id_ed25519
  IdentitiesOnly yes
  UserKnownHostsFile $dir/known_hosts
  StrictHostKeyChecking yes
  BatchMode yes
  ConnectTimeout 5
  LogLevel ERROR
EOF
  # Ready when every sshd answers.
  for name in "${names[@]}"; do
    local ok=
    for _ in $(seq 1 50); do
      if ssh "$name" true 2>/dev/null; then ok=1; break; fi
      sleep 0.1
    done
    [ -n "$ok" ] || { echo "cluster: sshd on $name does not answer" >&2; cat "$dir/$name/sshd.log" >&2 || true; false; }
  done
  if [ -n "$slurm" ]; then slurm_up "$dir" "$id" "$net"; fi
  trap - ERR
  echo "$dir"
}

# slurm_up DIR ID NET: munged, slurmctld and one slurmd per host.
slurm_up() {
  local dir=$1 id=$2 net=$3 s=$1/slurm name ip ns
  mkdir -p "$s/state"
  head -c 128 /dev/urandom >"$dir/munge.key"
  chmod 400 "$dir/munge.key"
  munged -S "$dir/munge.sock" --key-file "$dir/munge.key" --pid-file "$dir/munged.pid" \
    --log-file "$dir/munged.log" --seed-file "$dir/munged.seed" -f
  cat >"$s/slurm.conf" <<EOF
ClusterName=gorun$id
SlurmctldHost=gorunctl$id($net.254)
SlurmctldPort=$((17000 + id))
SlurmdPort=6818
AuthType=auth/munge
AuthInfo=socket=$dir/munge.sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$s/state
SlurmdSpoolDir=$s/spool-%n
SlurmctldPidFile=$s/slurmctld.pid
SlurmdPidFile=$s/slurmd-%n.pid
SlurmctldLogFile=$s/slurmctld.log
SlurmdLogFile=$s/slurmd-%n.log
# No cgroups in this sandbox: plain process tracking, no task plugin.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
# The hosts share this machine's CPUs: trust the node lines below.
SlurmdParameters=config_overrides
ReturnToService=2
MpiDefault=none
SwitchType=switch/none
PlugStackConfig=/dev/null
EOF
  while read -r name ip ns; do
    echo "NodeName=$name NodeAddr=$ip CPUs=4 State=UNKNOWN" >>"$s/slurm.conf"
  done <"$dir/hosts"
  echo "PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES" >>"$s/slurm.conf"
  export SLURM_CONF=$s/slurm.conf
  touch "$dir/uts-ctl"
  unshare --uts="$dir/uts-ctl" hostname "gorunctl$id"
  nsenter --uts="$dir/uts-ctl" slurmctld -c
  while read -r name ip ns; do
    nsenter --net="/run/netns/$ns" --uts="$dir/uts-$name" slurmd -N "$name"
  done <"$dir/hosts"
  local idle=
  for _ in $(seq 1 100); do
    if [ "$(sinfo -h -t idle -o %D 2>/dev/null)" = "$(wc -l <"$dir/hosts")" ]; then idle=1; break; fi
    sleep 0.2
  done
  if [ -z "$idle" ]; then
    echo "cluster: slurm nodes not idle:" >&2
    sinfo >&2 || true
    tail -n 5 "$s"/*.log >&2 || true
    false
  fi
}

exec_in() { # HOST CMD...
  local host=$1 d name ip ns
  shift
  for d in "$ROOT"/[0-9]*; do
    [ -f "$d/hosts" ] || continue
    # The hosts file on fd 3, not stdin: CMD gets the caller's stdin (a
    # launcher sends the job token on it).
    while read -r name ip ns <&3; do
      if [ "$name" = "$host" ] || [ "$ip" = "$host" ]; then
        exec 3<&- nsenter --net="/run/netns/$ns" --uts="$d/uts-$name" -- "$@"
      fi
    done 3<"$d/hosts"
  done
  die "exec: no cluster host $host"
}

cmd=${1:-}
shift || true
case $cmd in
  up) up "$@" ;;
  down)
    case ${1:-} in
      "") die "down: want DIR, all or stale" ;;
      all) for d in "$ROOT"/[0-9]*; do [ -d "$d" ] && down "$d"; done; true ;;
      stale) down_stale ;;
      *) down "$1" ;;
    esac ;;
  exec) [ $# -ge 2 ] || die "exec: want HOST CMD..."; exec_in "$@" ;;
  run)
    args=()
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do args+=("$1"); shift; done
    [ "${1:-}" = "--" ] || die "run: want [up options] -- CMD..."
    shift
    dir=$(up "${args[@]}" -owner $$)
    trap 'down "$dir"' EXIT INT TERM
    GORUN_CLUSTER=$dir "$@"
    ;;
  *) sed -n '2,/^set -Eeuo/p' "$SELF" | sed '$d; s/^# \{0,1\}//'; exit 2 ;;
esac
