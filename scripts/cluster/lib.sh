# Shared by scripts/cluster/*.sh: paths, addresses, process bookkeeping and the containment guard.
# Sourced, never run. Everything lives under $KPC (default /tmp/kproxy-cluster), binaries under
# $ANCHOR (default /tmp/anchor) and test images under $CONF (default /tmp/conf): out of the repo.
# shellcheck shell=bash

A=${ANCHOR:-/tmp/anchor}
C=${CONF:-/tmp/conf}
K=${KPC:-/tmp/kproxy-cluster}
CLUSTER_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$CLUSTER_DIR/../.." && pwd)

# The fabric: one bridge in its own namespace joins the host (apiserver) and every node, so
# nodes reach each other and the host without the host forwarding anything.
FABRIC_NS=kpc-fabric
HOST_IP=192.168.234.1          # kube-apiserver, on the host end of its veth into the fabric
DNS_IP=192.168.234.2           # the cluster DNS (dns.ts), in the fabric namespace
FABRIC_CIDR=192.168.234.0/24
CLUSTER_CIDR=10.244.0.0/16
SVC_CIDR=${SVC_CIDR:-10.97.0.0/16}
APISERVER=https://$HOST_IP:7443
MAX_NODES=3

P=$K/pki
PIDS=$K/pids
LOGS=$K/logs
mkdir -p "$K" "$PIDS" "$LOGS"

node_name() { echo "kpc-n$1"; }              # node N's name, network namespace and hostname
node_ip() { echo "192.168.234.$((10 + $1))"; }
pod_cidr() { echo "10.244.$(($1 - 1)).0/24"; } # node.sh writes it into the Node (no allocator)
pod_gw() { echo "10.244.$(($1 - 1)).1"; }
node_run() { echo "/run/kpc-n$1"; }           # containerd's state and socket
node_dir() { echo "$K/n$1"; }
in_node() { local n=$1; shift; nsenter --net="/run/netns/$(node_name "$n")" "$@"; }
nodes_up() { ip netns list | awk '{print $1}' | sed -n 's/^kpc-n\([0-9]\)$/\1/p' | sort -n; }

kc() { "$C/kubectl" --kubeconfig "$K/kubeconfig" "$@"; }
log() { printf '[cluster %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

start_bg() { # NAME CMD...: run in the background, log to $LOGS/NAME.log, PID in $PIDS/NAME.pid
  local name=$1; shift
  nohup "$@" >>"$LOGS/$name.log" 2>&1 &
  echo $! >"$PIDS/$name.pid"
}
running() { [ -f "$PIDS/$1.pid" ] && kill -0 "$(cat "$PIDS/$1.pid")" 2>/dev/null; }
stop_bg() { # NAME [SECONDS]: SIGTERM, then SIGKILL after SECONDS (default 30)
  local f=$PIDS/$1.pid pid
  [ -f "$f" ] || return 0
  pid=$(cat "$f")
  if kill "$pid" 2>/dev/null; then
    for _ in $(seq 1 "${2:-30}"); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}

wait_for() { # SECONDS DESCRIPTION CMD...: poll CMD every second until it succeeds
  local seconds=$1 what=$2; shift 2
  for _ in $(seq 1 "$seconds"); do "$@" >/dev/null 2>&1 && return 0; sleep 1; done
  log "timed out after ${seconds}s waiting for $what"
  return 1
}

# Containment: a node namespace may send only to loopback, the fabric, pods and services. The
# hooks run after every proxy's DNAT (priority 100), so a Service's endpoints are checked too.
# Nothing here removes this table; `down` deletes the namespace with it.
guard() {
  nsenter --net="/run/netns/$1" nft -f - <<NFT
table ip kpc_guard
delete table ip kpc_guard
table ip kpc_guard {
  set ok { type ipv4_addr; flags interval; elements = { 127.0.0.0/8, $FABRIC_CIDR, $CLUSTER_CIDR, $SVC_CIDR } }
  chain guard_out { type filter hook output priority 100; policy accept; ip daddr != @ok counter drop; }
  chain guard_fwd { type filter hook forward priority 100; policy accept; ip daddr != @ok counter drop; }
}
table ip6 kpc_guard
delete table ip6 kpc_guard
table ip6 kpc_guard {
  chain guard_out { type filter hook output priority 100; policy accept; ip6 daddr != ::1 counter drop; }
  chain guard_fwd { type filter hook forward priority 100; policy drop; }
}
NFT
}

# Every proxy's rules in a node namespace, the guard excepted: what a reboot or a proxy switch
# leaves behind when it removes them.
flush_proxy_rules() {
  local ns=$1 fam name
  while read -r _ fam name; do
    [ "$name" = kpc_guard ] && continue
    nsenter --net="/run/netns/$ns" nft delete table "$fam" "$name"
  done < <(nsenter --net="/run/netns/$ns" nft list tables 2>/dev/null)
  # iptables-legacy tables (nft's listing does not show them)
  for family in ip ip6; do
    local cmd=iptables-legacy names=/proc/net/ip_tables_names
    [ "$family" = ip6 ] && cmd=ip6tables-legacy names=/proc/net/ip6_tables_names
    for table in $(nsenter --net="/run/netns/$ns" cat "$names" 2>/dev/null); do
      nsenter --net="/run/netns/$ns" "$cmd" -t "$table" -F
      nsenter --net="/run/netns/$ns" "$cmd" -t "$table" -X
    done
  done
  nsenter --net="/run/netns/$ns" conntrack -F >/dev/null 2>&1 || true
}
