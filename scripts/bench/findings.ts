/**
 * Profile findings written into `docs/BENCHMARKS.md` under "Profile and next
 * steps": where the time goes where a target is missed, and what to change.
 * Edit by hand after a run; the split comes from the timing spans the bench
 * records (render, rule load, sync, list floor).
 *
 * @module
 */

/** Markdown paragraphs, one per finding. */
export const PROFILE_NOTES: readonly string[] = [
  "Run of 2026-11-23: other engineers' soak and kernel tests shared the 2-core machine (load " +
  "average ~3), so absolute times are pessimistic against facts.md (2.9 s at 10k on an idle " +
  "machine); the ratios to the baselines measured in the same run are what to read.",
  "**nftables full sync (10k: 4.8 s, 30k: 20 s; targets 3 s / 12 s).** Rendering is 0.5 s / " +
  "2.2 s of it; the rest is `nft -f` in the kernel. Next step (backends/nftables): measure the " +
  "render without the per-service `svc-HASH-ns/name/proto/port` chain names (long names cost in " +
  "nft's parser and in netlink messages: shorten to `svc-HASH`), and split the first load into " +
  "two `nft -f` calls (chains + rules, then the `service-ips` map elements) to check whether " +
  "the map insert dominates; then re-run on an idle machine.",
  "**One endpoint change (1k: 36 ms, 10k: 159 ms, 30k: 399 ms; target ≤ 100 ms flat).** The " +
  "rule load alone is 347 ms of the 399 ms at 30k, so the cost is in `nft -f` of the partial " +
  "transaction, not in planning or rendering (≤ 50 ms). A transaction that replaces one chain " +
  "should not grow with the table; facts.md measured 0.08 s for it at 10k. Next step " +
  "(backends/nftables/render.ts `renderIncremental`): print the partial transaction at 30k and " +
  "check that it only touches the changed service (no `flush`/re-add of table-wide sets such as " +
  "`cluster-ips`, `nodeport-ips`, `service-cidrs`, no `add table` with all declarations), and " +
  "that `nft` is not given `-c`/echo flags that make it dump the table.",
  "**Peak RSS (10k/100k: 417 MiB; 30k/300k: 833 MiB; target ≤ 200 MB).** The floor (Deno + " +
  "client-node) is 116 MiB. `lib/source/kube.ts` `#list` keeps every page of raw JSON until the " +
  "whole list is in, then hands it to the tracker, which parses it into the model: at peak the " +
  "raw objects, the parsed state, the first plan and the rendered nft script (tens of MB of " +
  "text) are all alive. Next steps: emit upserts page by page (keep only keys for the relist " +
  "delete pass), and render the first sync as a stream of chunks written to `nft`'s stdin " +
  "instead of one string; drop the imported-but-unused client-node (`KubeConfig` alone pulls " +
  "the whole generated API, ~118 MB RSS per facts.md) by parsing the kubeconfig with `yaml`.",
  "**Start-up to first sync at 10k (8.3 s; target 5 s).** Deno + client-node start: 1.2 s; " +
  "listing from the fake apiserver: 0.6 s; the full nftables load: ~4.8 s (see above); the rest " +
  "is parsing and planning 10k services. It follows the full-sync fix and the memory fix above.",
  "**Event storm.** nftables: 10,000 changes in 9.9 s coalesced into 23 partial syncs, the last " +
  "change in the kernel 0.6 s after the last send, nothing lost. Checking the result by reading " +
  "the ruleset back (`nft list ruleset`) took ~280 s at 10k services — the upstream pain kproxy " +
  "avoids by keeping its own record. iptables: one full sync hit the 300 s command timeout " +
  "(`iptables-nft-restore` at 10k while the machine was loaded), was retried, and the last " +
  "change reached the kernel after 394 s; nothing lost. Next step (backends/iptables): after a " +
  "failed restore, retry with a partial sync of what changed rather than a full one.",
  "**Data path.** nftables connect latency is flat (162 µs first and last of 10k services), " +
  "iptables grows with the rule position (41 µs first, 241 µs last). nftables' flat figure is " +
  "above iptables' first-service figure here; the machine was loaded during this section, so " +
  "re-run it alone (`--only=datapath`) before drawing more from the absolute values.",
  "**Not measured in this run.** The iptables rows of the full-sync table: `benchIptables` " +
  "threw at 30k with the legacy binaries (`iptables-legacy-restore: line 1290039 failed`), which " +
  "dropped every iptables row of that call; main.ts now measures each variant × size on its own. " +
  "The upstream-style iptables-nft baseline at 30k was stopped after 4 minutes (the bench now " +
  "stops baselines after 3 minutes). Refresh with `deno task bench --from-json=" +
  "/tmp/kp-bench-results.json --only=fullsync --fullsync-modes=iptables`.",
];
