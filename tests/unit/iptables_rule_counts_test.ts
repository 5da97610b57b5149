import assert from "node:assert/strict";
import { ChainRuleCounts } from "../../backends/iptables/rule_counts.ts";

Deno.test("ChainRuleCounts keeps each table's total as chains are flushed, appended to and deleted", () => {
  const counts = new ChainRuleCounts();
  assert.equal(counts.total("nat"), 0);
  counts.flushed("nat", "KUBE-SERVICES");
  counts.appended("nat", "KUBE-SERVICES", 3);
  counts.appended("nat", "KUBE-SVC-A", 2);
  counts.appended("filter", "KUBE-FORWARD", 4);
  assert.deepEqual([counts.total("nat"), counts.total("filter")], [5, 4]);
  counts.flushed("nat", "KUBE-SERVICES");
  assert.equal(counts.total("nat"), 2, "a flushed chain holds no rule");
  counts.appended("nat", "KUBE-SERVICES", 1);
  assert.equal(counts.total("nat"), 3);
  counts.deleted("nat", "KUBE-SVC-A");
  counts.deleted("nat", "KUBE-SVC-GONE");
  assert.deepEqual([counts.total("nat"), counts.total("filter")], [1, 4]);
  counts.appended("nat", "KUBE-SVC-A", 2);
  assert.equal(counts.total("nat"), 3, "a deleted chain starts again from no rule");
});
