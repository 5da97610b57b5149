#!/usr/bin/env bash
# kproxy as operators run it: the image from `deno task image`, imported into every node's
# containerd, and the shipped scripts/deploy/{rbac,configmap,daemonset}.yaml applied with kubectl
# (the ConfigMap with this cluster's apiserver endpoint and pod CIDR filled in, as an operator
# does). And kube-proxy 1.36 for the comparison: a host process in each node namespace with the
# same KubeProxyConfiguration.
# usage: deploy.sh image | apply | remove | kube-proxy-start | kube-proxy-stop
set -euo pipefail
. "$(dirname "$0")/lib.sh"
DEPLOY=$REPO/scripts/deploy
DENO=${DENO:-deno}

site_config() {
  "$DENO" run --allow-read --allow-env=LOG_TOKENS,LOG_STREAM "$CLUSTER_DIR/site_config.ts" \
    "$DEPLOY/configmap.yaml" --apiserver "$APISERVER" --cluster-cidr "$CLUSTER_CIDR" \
    --conntrack-readonly "$@"
}

image() {
  log "building kproxy's image (deno task image)"
  (cd "$REPO" && "$DENO" task image --output "$K/kproxy-image.tar")
  local n
  for n in $(nodes_up); do
    log "importing the image into $(node_name "$n")'s containerd"
    "${CTRD_ROOT:-$A/containerd}/root/usr/bin/ctr" --address "$(node_run "$n")/containerd.sock" \
      -n k8s.io images import --platform linux/amd64 "$K/kproxy-image.tar" >/dev/null
  done
}

apply() {
  kc apply -f "$DEPLOY/rbac.yaml"
  site_config | kc apply -f -
  kc apply -f "$DEPLOY/daemonset.yaml"
  kc -n kube-system rollout status daemonset/kproxy --timeout="${ROLLOUT_TIMEOUT:-300s}"
}

remove() {
  kc delete -f "$DEPLOY/daemonset.yaml" --ignore-not-found --wait=true --timeout=120s
  wait_for 120 "kproxy's pods to go" sh -c \
    "! '$C/kubectl' --kubeconfig '$K/kubeconfig' -n kube-system get pods -l k8s-app=kproxy -o name | grep -q ."
  local n
  for n in $(nodes_up); do flush_proxy_rules "$(node_name "$n")"; done
}

kube_proxy_start() {
  local n name
  for n in $(nodes_up); do
    name=$(node_name "$n")
    site_config --config-only --hostname-override "$name" --kubeconfig "$K/kubeconfig" \
      >"$(node_dir "$n")/kube-proxy.yaml"
    flush_proxy_rules "$name"
    start_bg "proxy$n" nsenter --net="/run/netns/$name" "$A/bin/kube-proxy" \
      --config="$(node_dir "$n")/kube-proxy.yaml" --v="${PROXY_V:-2}"
  done
  for n in $(nodes_up); do
    wait_for 120 "kube-proxy on $(node_name "$n")" \
      in_node "$n" curl -sf -o /dev/null http://127.0.0.1:10256/healthz
  done
}

kube_proxy_stop() {
  local n
  for n in $(nodes_up); do
    stop_bg "proxy$n"
    flush_proxy_rules "$(node_name "$n")"
  done
}

case "${1:-}" in
  image) image ;;
  apply) apply ;;
  remove) remove ;;
  kube-proxy-start) kube_proxy_start ;;
  kube-proxy-stop) kube_proxy_stop ;;
  *)
    echo "usage: $0 image | apply | remove | kube-proxy-start | kube-proxy-stop" >&2
    exit 2
    ;;
esac
