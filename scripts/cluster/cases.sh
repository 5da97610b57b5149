#!/usr/bin/env bash
# The operator's cases, with kproxy running as the shipped DaemonSet (deploy.sh apply):
#   workload  a Deployment of 3 agnhost pods behind a NodePort Service, namespace kpc-cases
#   answers   from every node: the cluster IP, and the node port on every node's IP
#   bootstrap nodes that had no proxy rules before the DaemonSet: pods Ready without a restart
#   reboot N  node.sh reboot N (kubelet, containerd and every rule gone), then unaided recovery
#   new-node  node.sh up 3 after the DaemonSet: its kproxy pod comes and the node answers
# Each prints "case NAME: pass|FAIL (reason)" and appends it to $K/results/cases.txt.
# usage: cases.sh workload | answers | bootstrap | reboot N | new-node N | no-rules N
set -euo pipefail
. "$(dirname "$0")/lib.sh"
NS=kpc-cases
RESULTS=$K/results
mkdir -p "$RESULTS"

record() { # NAME pass|FAIL [REASON]
  local line="case $1: $2${3:+ ($3)}"
  echo "$line" | tee -a "$RESULTS/cases.txt"
  [ "$2" = pass ]
}

workload() {
  kc create namespace "$NS" --dry-run=client -o yaml | kc apply -f -
  kc apply -f - <<EOF
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: $NS}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      topologySpreadConstraints:
        - {maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: ScheduleAnyway,
           labelSelector: {matchLabels: {app: web}}}
      containers:
        - name: web
          image: $(cat "$C/images/agnhost.name")
          args: [netexec, --http-port=8080]
          readinessProbe: {httpGet: {path: /healthz, port: 8080}, periodSeconds: 2}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: $NS}
spec:
  type: NodePort
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
EOF
  kc -n "$NS" rollout status deployment/web --timeout=300s
}

service_address() { kc -n "$NS" get service web -o jsonpath="{$1}"; }

answers_from() { # N: the Service answers from node N at its cluster IP and every node port
  local n=$1 cluster_ip node_port m
  cluster_ip=$(service_address .spec.clusterIP)
  node_port=$(service_address '.spec.ports[0].nodePort')
  local targets=("$cluster_ip:80")
  for m in $(nodes_up); do targets+=("$(node_ip "$m"):$node_port"); done
  for target in "${targets[@]}"; do
    wait_for "${ANSWER_SECONDS:-90}" "node $n to reach $target" \
      in_node "$n" curl -sf --max-time 2 "http://$target/hostname" || return 1
  done
}

answers() {
  local n failed=""
  for n in $(nodes_up); do answers_from "$n" || failed="$failed $(node_name "$n")"; done
  if [ -z "$failed" ]; then record answers pass; else record answers FAIL "no answer from$failed"; fi
}

kproxy_ready_on() { # N: the kproxy pod on node N is Ready
  local pod
  pod=$(kc -n kube-system get pods -l k8s-app=kproxy --field-selector "spec.nodeName=$(node_name "$1")" \
    -o jsonpath='{.items[0].status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)
  [ "$pod" = True ]
}

restarts_on() { # N: how often the kproxy pod on node N restarted
  kc -n kube-system get pods -l k8s-app=kproxy --field-selector "spec.nodeName=$(node_name "$1")" \
    -o jsonpath='{.items[0].status.containerStatuses[0].restartCount}'
}

# A service proxy's rules: kproxy's and kube-proxy's nftables tables, and the iptables chains
# either writes (kubelet's own KUBE-FIREWALL, KUBE-KUBELET-CANARY and KUBE-IPTABLES-HINT are not).
PROXY_RULES='table (ip|ip6|inet) (kproxy|kube-proxy)|chain KUBE-(SERVICES|NODEPORTS|SVC-|SEP-|EXT-|FW-|POSTROUTING|MARK-MASQ|PROXY-)'

no_rules() { # N: the node holds no proxy rules
  local found
  found=$(in_node "$1" nft list ruleset 2>/dev/null | grep -oE "$PROXY_RULES" | sort -u || true)
  if [ -z "$found" ]; then
    record "no-rules $(node_name "$1")" pass
  else
    record "no-rules $(node_name "$1")" FAIL "$(echo "$found" | tr '\n' ' ')"
  fi
}

bootstrap() {
  local n failed=""
  for n in $(nodes_up); do
    wait_for 180 "kproxy Ready on $(node_name "$n")" kproxy_ready_on "$n" || failed="$failed not-ready:$(node_name "$n")"
    [ "$(restarts_on "$n")" = 0 ] || failed="$failed restarted:$(node_name "$n")"
  done
  [ -n "$failed" ] && { record bootstrap FAIL "$failed"; return 1; }
  workload
  for n in $(nodes_up); do answers_from "$n" || failed="$failed no-answer:$(node_name "$n")"; done
  if [ -z "$failed" ]; then record bootstrap pass; else record bootstrap FAIL "$failed"; fi
}

reboot() {
  local n=$1
  "$CLUSTER_DIR/node.sh" halt "$n"
  no_rules "$n" || true
  "$CLUSTER_DIR/node.sh" boot "$n"
  if wait_for 300 "kproxy Ready again on $(node_name "$n")" kproxy_ready_on "$n" && answers_from "$n"; then
    record "reboot $(node_name "$n")" pass
  else
    record "reboot $(node_name "$n")" FAIL "kproxy not Ready or no answer after the reboot"
  fi
}

new_node() {
  local n=$1 m failed=""
  "$CLUSTER_DIR/node.sh" prepare "$n"
  no_rules "$n" || failed="rules-before-joining"
  "$CLUSTER_DIR/node.sh" up "$n"
  wait_for 300 "kproxy Ready on the new $(node_name "$n")" kproxy_ready_on "$n" || failed="not-ready"
  answers_from "$n" || failed="$failed no-answer-from-new-node"
  for m in $(nodes_up); do
    [ "$m" = "$n" ] && continue
    answers_from "$m" || failed="$failed no-answer-from:$(node_name "$m")"
  done
  if [ -z "$failed" ]; then record "new-node $(node_name "$n")" pass; else record "new-node $(node_name "$n")" FAIL "$failed"; fi
}

case "${1:-}" in
  workload) workload ;;
  answers) answers ;;
  bootstrap) bootstrap ;;
  reboot) reboot "${2:?node number}" ;;
  new-node) new_node "${2:?node number}" ;;
  no-rules) no_rules "${2:?node number}" ;;
  *)
    echo "usage: $0 workload | answers | bootstrap | reboot N | new-node N | no-rules N" >&2
    exit 2
    ;;
esac
