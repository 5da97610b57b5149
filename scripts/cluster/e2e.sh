#!/usr/bin/env bash
# Upstream's e2e network tests against the test cluster, with whatever proxy runs now.
# usage: e2e.sh LABEL          results in $K/results/LABEL/{e2e.log,junit_01.xml,params.txt}
#   FOCUS  ginkgo focus (default: the [sig-network] Services, Networking Granular Checks:
#          Services, Conntrack and Service CIDRs tests)
#   SKIP   ginkgo skip (default: [Serial], [Disruptive], [Flaky], [Feature:*], [Slow])
#   PROCS  specs in parallel (default 3)
# Never run e2e.test without a focus: unfocused, the general suite tries to reach the internet.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
label=${1:?a label for the results, e.g. kproxy}
FOCUS=${FOCUS:-'\[sig-network\] (Services|Networking Granular Checks: Services|Conntrack|Service CIDRs) '}
SKIP=${SKIP:-'\[Serial\]|\[Disruptive\]|\[Flaky\]|\[Feature:|\[Slow\]'}
PROCS=${PROCS:-3}
OUT=$K/results/$label
rm -rf "$OUT"
mkdir -p "$OUT"
nodes=$(nodes_up | wc -l)
printf 'label: %s\nnodes: %s\nfocus: %s\nskip: %s\nprocs: %s\nstarted: %s\n' \
  "$label" "$nodes" "$FOCUS" "$SKIP" "$PROCS" "$(date -u +%FT%TZ)" >"$OUT/params.txt"
flags=(--kubeconfig "$K/kubeconfig" --provider skeleton --kubectl-path "$C/kubectl"
  --report-dir "$OUT" --disable-log-dump --dump-logs-on-failure=false --num-nodes="$nodes")
export KUBE_TEST_REPO_LIST=$C/repo-list.yaml PATH=$C:$PATH
log "e2e ($label): $nodes nodes, $PROCS in parallel"
set +e
"$C/ginkgo" --procs="$PROCS" --focus "$FOCUS" --skip "$SKIP" --no-color -v --timeout 3h \
  "$C/e2e.test" -- "${flags[@]}" >"$OUT/e2e.log" 2>&1
rc=$?
set -e
echo "finished: $(date -u +%FT%TZ) rc=$rc" >>"$OUT/params.txt"
log "e2e ($label) rc=$rc: $(grep -E '^(Ran |PASS|FAIL)' "$OUT/e2e.log" | tail -2 | tr '\n' ' ')"
