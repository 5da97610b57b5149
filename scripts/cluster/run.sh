#!/usr/bin/env bash
# The whole check, one command (root; ~45 minutes the first time on 2 cores, ~40 afterwards):
#   1. build or reuse the binaries and test images (build.sh)
#   2. the control plane and nodes 1 and 2, with no proxy rules (control.sh, node.sh)
#   3. kproxy's image (deno task image) into each node's containerd; the shipped rbac.yaml,
#      configmap.yaml and daemonset.yaml applied with kubectl (deploy.sh)
#   4. the operator's cases (cases.sh): bootstrap, a node added later (node 3), a reboot (node 2)
#   5. upstream's e2e network tests with kproxy as the DaemonSet, then with kube-proxy 1.36 on
#      the same three nodes (e2e.sh), and the table of both (results.ts)
#   6. everything torn down (KEEP=1 keeps the cluster)
# Results: $KPC/results/{cases.txt,table.md,kproxy/,kube-proxy/} (KPC default /tmp/kproxy-cluster).
# usage: run.sh [all | down]      E2E=0 skips step 5; FOCUS/SKIP/PROCS go to e2e.sh
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"

down() {
  local n
  "$HERE/deploy.sh" kube-proxy-stop 2>/dev/null || true
  for n in $(nodes_up | sort -rn); do "$HERE/node.sh" down "$n"; done
  "$HERE/control.sh" down
}

all() {
  "$HERE/build.sh" || die "build failed"
  rm -f "$K/results/cases.txt"
  "$HERE/control.sh" up || die "the control plane did not come up"
  "$HERE/node.sh" up 1 || die "node 1 did not come up"
  "$HERE/node.sh" up 2 || die "node 2 did not come up"
  "$HERE/deploy.sh" image || die "kproxy's image did not build"
  "$HERE/cases.sh" no-rules 1
  "$HERE/cases.sh" no-rules 2
  "$HERE/deploy.sh" apply
  "$HERE/cases.sh" bootstrap
  "$HERE/cases.sh" new-node 3
  "$HERE/cases.sh" reboot 2
  "$HERE/cases.sh" answers
  if [ "${E2E:-1}" = 1 ]; then
    "$HERE/e2e.sh" kproxy
    "$HERE/deploy.sh" remove
    "$HERE/deploy.sh" kube-proxy-start
    "$HERE/e2e.sh" kube-proxy
    "$HERE/deploy.sh" kube-proxy-stop
    "${DENO:-deno}" run --allow-read "$HERE/results.ts" "$K/results/kube-proxy" "$K/results/kproxy" |
      tee "$K/results/table.md"
  fi
  echo
  cat "$K/results/cases.txt"
  [ -n "${KEEP:-}" ] || down
}

case "${1:-all}" in
  all) all ;;
  down) down ;;
  *)
    echo "usage: $0 [all | down]" >&2
    exit 2
    ;;
esac
