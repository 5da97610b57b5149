#!/usr/bin/env bash
# One node of the test cluster: network namespace kpc-nN with a veth into the fabric
# (192.168.234.(10+N)/24), routes to the other nodes' pod subnets, the containment guard,
# containerd 2.1 + runc + a CNI bridge (pods 10.244.(N-1).0/24) in its own UTS namespace named
# after the node, and kubelet (node "kpc-nN", cgroup root /kpc-nN). No proxy: that comes from the
# DaemonSet (deploy.sh) or proxy.sh.
# usage: node.sh up N | prepare N | down N | reboot N | halt N | boot N | ctr N ARGS...
#   prepare: the namespace, cgroups and containerd, not yet the kubelet (the node is not joined)
#   reboot = halt + boot. halt: what a node restart does to the packet path: kubelet and containerd
#   stop, every container dies, every proxy rule and conntrack entry is gone. boot: containerd and
#   kubelet start again and must bring the node back unaided.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

N=${2:?node number 1..$MAX_NODES}
[ "$N" -ge 1 ] && [ "$N" -le "$MAX_NODES" ] || die "node number must be 1..$MAX_NODES"
NAME=$(node_name "$N")
IP=$(node_ip "$N")
D=$(node_dir "$N")
RUN=$(node_run "$N")
CTRD_ROOT=${CTRD_ROOT:-$A/containerd}
CG=/$NAME
mkdir -p "$D"
ctr() { "$CTRD_ROOT/root/usr/bin/ctr" --address "$RUN/containerd.sock" "$@"; }

containerd_bins() {
  [ -x "$CTRD_ROOT/root/usr/bin/containerd" ] && return 0
  # containerd 2.x from sid (it links only glibc >= 2.34) and the CNI plugins from bookworm,
  # unpacked privately; runc is bookworm's own (sid's needs glibc 2.38).
  mkdir -p "$CTRD_ROOT/debs" "$CTRD_ROOT/root"
  (cd "$CTRD_ROOT/debs" && apt-get download "containerd=${CONTAINERD_DEB:-2.1.9+ds1-5}" \
    "containernetworking-plugins=${CNI_DEB:-1.1.1+ds1-3+b5}")
  for f in "$CTRD_ROOT"/debs/*.deb; do dpkg -x "$f" "$CTRD_ROOT/root"; done
  rm -f "$CTRD_ROOT/root/usr/bin/runc" "$CTRD_ROOT/root/usr/sbin/runc"
}

netns_up() {
  ip netns list | grep -qw "$NAME" && return 0
  ip netns add "$NAME"
  ip link add "kpc-f$N" type veth peer name "kpc-n$N"
  ip link set "kpc-n$N" netns "$NAME"
  ip link set "kpc-f$N" netns "$FABRIC_NS"
  ip -n "$FABRIC_NS" link set "kpc-f$N" master kpcbr up
  ip -n "$NAME" link set lo up
  ip -n "$NAME" addr add "$IP/24" dev "kpc-n$N"
  ip -n "$NAME" link set "kpc-n$N" up
  # Every address outside the fabric leaves towards the host, which forwards nothing: a Service
  # IP no rule translates dies there, as on a real node without a proxy.
  ip -n "$NAME" route add default via "$HOST_IP"
  in_node "$N" sysctl -qw net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1 \
    net.bridge.bridge-nf-call-ip6tables=1
  in_node "$N" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 || true
  guard "$NAME"
  routes
}

routes() { # pod subnets of every node that is up, in both directions, and the host's
  local m
  for m in $(nodes_up); do
    [ "$m" = "$N" ] && continue
    ip -n "$NAME" route replace "$(pod_cidr "$m")" via "$(node_ip "$m")"
    ip -n "$(node_name "$m")" route replace "$(pod_cidr "$N")" via "$IP"
  done
  ip route replace "$(pod_cidr "$N")" via "$IP" dev kpc-h # apiserver -> pods (proxy, webhooks)
  ip -n "$FABRIC_NS" route replace "$(pod_cidr "$N")" via "$IP" # the DNS's answers to pods
}

cgroups() { # the kubelet's own cgroup root; a v1 cpuset child starts empty: give it the root's
  local c f
  for c in /sys/fs/cgroup/*/; do [ -L "${c%/}" ] || mkdir -p "$c${CG#/}"; done
  for f in cpuset.cpus cpuset.mems; do
    [ -f "/sys/fs/cgroup/cpuset/$f" ] && cat "/sys/fs/cgroup/cpuset/$f" >"/sys/fs/cgroup/cpuset$CG/$f"
  done
  return 0
}

containerd_up() {
  containerd_bins
  mkdir -p "$D/cni/net.d" "$RUN" "$D/containerd"
  cat >"$D/cni/net.d/10-kpc.conflist" <<EOF
{"cniVersion": "1.0.0", "name": "kpc", "plugins": [
  {"type": "bridge", "bridge": "kpc0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "$(pod_cidr "$N")", "gateway": "$(pod_gw "$N")"}]],
            "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "$D/cni/ipam"}}]}
EOF
  cat >"$D/containerd.toml" <<EOF
version = 3
root = "$D/containerd"
state = "$RUN/state"
[grpc]
  address = "$RUN/containerd.sock"
[ttrpc]
  address = "$RUN/containerd.sock.ttrpc"
[plugins]
  [plugins.'io.containerd.nri.v1.nri']
    disable = true
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = '${SNAPSHOTTER:-overlayfs}'
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = '$(cat "$C/images/pause.name")'
  [plugins.'io.containerd.cri.v1.runtime']
    netns_mounts_under_state_dir = true
    # no CAP_SYS_RESOURCE here: runc may not lower oom_score_adj (the sandbox asks for -998)
    restrict_oom_score_adj = true
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = 'runc'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = 'io.containerd.runc.v2'
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = '${RUNC:-$(command -v runc)}'
          SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ['$CTRD_ROOT/root/usr/lib/cni']
      conf_dir = '$D/cni/net.d'
  [plugins.'io.containerd.grpc.v1.cri']
    disable_tcp_service = true
    stream_server_address = '127.0.0.1'
    stream_server_port = '0'
EOF
  # Its own UTS namespace named after the node: hostNetwork pods share it and must see the node
  # name as their hostname.
  PATH=$CTRD_ROOT/root/usr/bin:$PATH start_bg "containerd$N" nsenter --net="/run/netns/$NAME" \
    unshare --uts sh -c 'hostname "$0" && exec "$@"' "$NAME" \
    "$CTRD_ROOT/root/usr/bin/containerd" --config "$D/containerd.toml"
  wait_for 30 "containerd on $NAME" test -S "$RUN/containerd.sock"
  local image
  for image in pause agnhost regression busybox; do
    ctr -n k8s.io images import --platform linux/amd64 "$C/images/$image.tar" >/dev/null
  done
  if [ -f "$K/kproxy-image.tar" ]; then
    ctr -n k8s.io images import --platform linux/amd64 "$K/kproxy-image.tar" >/dev/null
  fi
}

kubelet_up() {
  mkdir -p "$D/kubelet" "$D/pod-logs"
  echo "nameserver $DNS_IP" >"$D/resolv.conf"
  cat >"$D/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: $CG
containerRuntimeEndpoint: unix://$RUN/containerd.sock
address: $IP
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
clusterDomain: cluster.local
clusterDNS: [$DNS_IP]
resolvConf: $D/resolv.conf
podLogsDir: $D/pod-logs
failSwapOn: false
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
maxPods: 110
EOF
  start_bg "kubelet$N" nsenter --net="/run/netns/$NAME" "$A/bin/kubelet" --config="$D/kubelet.yaml" \
    --kubeconfig="$K/kubeconfig" --root-dir="$D/kubelet" --cert-dir="$D/kubelet/pki" \
    --hostname-override="$NAME" --node-ip="$IP" --v="${KUBELET_V:-1}"
  wait_for 180 "node $NAME to register" kc get node "$NAME"
  # The pod CIDR is written here, not by the controller-manager's allocator: that one can hand a
  # node two CIDRs in a race, fail the second patch and skip the CIDR it released, so the next
  # node gets another subnet than its CNI bridge serves (seen with 1.36: kpc-n2 got 10.244.2.0/24).
  local cidr
  cidr=$(kc get node "$NAME" -o jsonpath='{.spec.podCIDR}')
  if [ -z "$cidr" ]; then
    kc patch node "$NAME" --type=merge \
      -p "{\"spec\":{\"podCIDR\":\"$(pod_cidr "$N")\",\"podCIDRs\":[\"$(pod_cidr "$N")\"]}}" >/dev/null
    cidr=$(kc get node "$NAME" -o jsonpath='{.spec.podCIDR}')
  fi
  [ "$cidr" = "$(pod_cidr "$N")" ] ||
    die "$NAME has pod CIDR '$cidr', its CNI bridge serves $(pod_cidr "$N")"
}

stop_node_processes() {
  stop_bg "proxy$N"
  stop_bg "kubelet$N"
  if [ -S "$RUN/containerd.sock" ]; then
    local task
    for task in $(ctr -n k8s.io tasks ls -q 2>/dev/null); do
      ctr -n k8s.io tasks kill -s SIGKILL "$task" 2>/dev/null || true
    done
    sleep 2
    for task in $(ctr -n k8s.io tasks ls -q 2>/dev/null); do
      ctr -n k8s.io tasks delete -f "$task" >/dev/null 2>&1 || true
    done
  fi
  stop_bg "containerd$N"
  # A shim outlives its containerd when the task was deleted while containerd was going away.
  pkill -9 -f "containerd-shim-runc-v2 .*-address $RUN/containerd.sock" 2>/dev/null || true
  local mount
  for mount in $(awk '{print $5}' /proc/self/mountinfo | grep -E "^($D/kubelet|$RUN|$D/containerd)" | sort -r); do
    umount -l "$mount" 2>/dev/null || true
  done
}

down() {
  kc delete node "$NAME" --wait=false >/dev/null 2>&1 || true
  stop_node_processes
  ip route del "$(pod_cidr "$N")" 2>/dev/null || true
  ip -n "$FABRIC_NS" route del "$(pod_cidr "$N")" 2>/dev/null || true
  local m
  for m in $(nodes_up); do
    [ "$m" = "$N" ] || ip -n "$(node_name "$m")" route del "$(pod_cidr "$N")" 2>/dev/null || true
  done
  ip netns del "$NAME" 2>/dev/null || true
  ip -n "$FABRIC_NS" link del "kpc-f$N" 2>/dev/null || true
  rm -rf "$RUN"
  local c
  for c in /sys/fs/cgroup/*/; do
    [ -d "$c${CG#/}" ] && find "$c${CG#/}" -depth -type d -exec rmdir {} \; 2>/dev/null
  done
  return 0
}

halt() { # what a node restart does to the packet path: every process, container and rule gone
  log "halting $NAME: kubelet and containerd stop, every container and proxy rule goes"
  stop_node_processes
  flush_proxy_rules "$NAME"
}

boot() { # containerd and kubelet start again on the node as it was left
  containerd_up
  start_bg "kubelet$N" nsenter --net="/run/netns/$NAME" "$A/bin/kubelet" --config="$D/kubelet.yaml" \
    --kubeconfig="$K/kubeconfig" --root-dir="$D/kubelet" --cert-dir="$D/kubelet/pki" \
    --hostname-override="$NAME" --node-ip="$IP" --v="${KUBELET_V:-1}"
}

case "${1:-}" in
  prepare | up)
    netns_up
    cgroups
    running "containerd$N" || containerd_up
    [ "$1" = prepare ] || running "kubelet$N" || kubelet_up
    ;;
  down) down ;;
  halt) halt ;;
  boot) boot ;;
  reboot)
    halt
    boot
    ;;
  ctr)
    shift 2
    ctr "$@"
    ;;
  *)
    echo "usage: $0 up N | prepare N | down N | reboot N | halt N | boot N | ctr N ARGS..." >&2
    exit 2
    ;;
esac
