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
  "Runs of 2026-11-23, after endpoints moved from rules into slot maps. The nftables storm and " +
  "data path were re-measured at 15:11–15:13, the one-change, start-up and memory sections at " +
  "15:25–15:26 (kproxy with the V8 flags of the compiled executable), the nftables full syncs " +
  "at 15:28–15:33 (median of three fresh namespaces each). The iptables rows come from the " +
  "runs of 12:27–13:19 (dates below). The bench cluster puts one endpoint in 1000 on the node " +
  "under test (300 at 30k × 10, a full node's worth).",
  "**nftables full sync (10k: 2.4 s, 30k: 7.6 s; targets 3 s / 12 s: met).** Until this run " +
  "each service port had a chain of E `numgen … dnat to ep_j` rules: 330k rules at 30k, which " +
  "nft parsed for ~6 s and the kernel built for ~7 s (17.4 s in all, 4.9 s at 10k). Endpoints " +
  "are now elements of one global slot map (`daddr . proto . port . slot → ep . port`) read by " +
  "a few chains shared by every service port with the same endpoint count, each one `dnat … " +
  "numgen random mod E map` rule. A trial with one such rule per service instead (30k rules " +
  "binding the same map) took 146 s at 30k: the kernel checks every earlier binding of a map " +
  "when a rule binds it. Single loads of the same script varied by ±25% on this machine " +
  "(2.1–3.3 s at 10k), hence the median. Rendering is 0.3 s / 1.2 s of it; the rest is nft " +
  "parsing 330k elements and the kernel inserting them. Session-affinity and " +
  "externalTrafficPolicy Local services keep per-service chains: the 10%-affinity column shows " +
  "their cost (4.4 s at 10k).",
  "**One endpoint change (1k: 35 ms, 10k: 30 ms, 30k: 41 ms end to end; target ≤ 100 ms flat: " +
  "met).** The transaction deletes and re-adds the changed slot elements (and, for a local " +
  "endpoint, two hairpin elements): no rule is replaced, so the kernel does not re-validate the " +
  "table, and nft's cache fill is small because the table now has ~300 chains, not 30k (the " +
  "floor column: 12–26 ms at every size, was 121 ms at 30k). Before: 544 ms at 30k. A " +
  "change of endpoint count moves the dispatch element to another shared chain: measured by " +
  "hand on the loaded 30k table, that transaction also takes ~10 ms. The rest " +
  "at 30k is ~10 ms of bookkeeping that still walks every service (indexing the plans, the " +
  "hairpin check when a local endpoint goes away). The backend's one-change column is higher " +
  "(87 ms at 30k) because it runs right after the 300k-element load, while the kernel is still " +
  "settling it. Limits: a change to an endpoint count above 64 that no service uses yet takes " +
  "a full sync (nft 1.0.6 cannot add a rule reading a slot map already in the kernel), and a " +
  "local endpoint going away costs ~20 ms more at 30k for the hairpin check.",
  "**Peak RSS (10k/100k: 274 MiB; 30k/300k: 530 MiB; target ≤ 200 MB: missed).** Was 375 MiB. " +
  "The full render kept 110k element objects until the end (+118 MB of heap at 10k); it now " +
  "keeps their text (+67 MB), and the compiled executable caps V8's young generation at 4 MB " +
  "per semi-space (V8 grew it to 64 MB during the first sync; +35 MB left for the render). At " +
  "the first sync the heap holds 118 MB of old space (63 MB live after a GC, 35 MB of which is " +
  "client-node), 34 MB of large objects (the script and the list pages' text) and ~60 MB " +
  "outside V8 that grows with the cluster (not glibc arenas: `MALLOC_ARENA_MAX=2` and fixed " +
  "mmap thresholds changed nothing). Handing list pages on one by one saved only 9 MB and was " +
  "not adopted (an expired continuation would repeat upserts). Next steps: write the first " +
  "sync to `nft`'s stdin in chunks of services instead of one string; find what outside V8 " +
  "grows with the cluster (a heap snapshot and a Rust-side profile); drop client-node for a " +
  "kubeconfig reader of our own (35 MB of heap, 117 MiB RSS floor).",
  "**Start-up to first sync at 10k (4.8 s; target 5 s: met).** Deno + client-node start: 0.6 s; " +
  "listing from the fake apiserver: 0.4 s; the full nftables load: ~2.4 s; the rest is parsing " +
  "and planning 10k services.",
  "**iptables.** kproxy writes kube-proxy's chains and, above 1000 endpoints, drops the " +
  "endpoint rules' comments as kube-proxy's large cluster mode does. Before that change the " +
  "30k legacy nat table was 575 MB and the kernel refused it (`ENOMEM`: one xtables table may " +
  "not exceed 512 MiB); now it loads (101 s). kproxy's iptables-nft full sync splits the input " +
  "into restores of bounded size (iptables-nft-restore is quadratic in the chains of one " +
  "input): 16 s at 10k where the single-input upstream-style load was stopped after 180 s. " +
  "With legacy binaries kproxy is level with the upstream-style load (14 s vs 12 s at 10k, " +
  "101 s vs 87 s at 30k; kproxy's figure includes its `iptables-save` of both tables and the " +
  "render). A one-change sync costs 0.47 s (nft) / 1.9 s (legacy) at 10k: legacy rewrites the " +
  "whole table blob on every restore, as upstream's does.",
  "**Event storm (re-measured 15:11).** nftables: 10,000 changes in 9.9 s went out in 167 " +
  "partial syncs, each at most 68 ms of rule load; the last change was in the kernel as the " +
  "last one was sent, nothing lost (was 28 syncs of up to 0.7 s: each element-only sync is " +
  "cheap enough that the runner no longer needs to coalesce). iptables (12:59–13:19): the " +
  "first run of this day put thousands of changed services into one partial " +
  "`iptables-nft-restore` input, which is quadratic in its chains and hit the 300 s command " +
  "timeout (retried, nothing lost). A partial sync that declares more chains than one chunk " +
  "now becomes the chunked full sync: the storm then took 4 syncs (2 full), the longest " +
  "command 3.1 s, the last change in the kernel 107 s after the first (was 373 s), nothing " +
  "lost. Next step: chunk partial syncs themselves, so a storm costs what changed.",
  "**Data path (re-measured 15:13).** nftables connect latency is flat (43 µs for the first " +
  "and the last of 10k services: one verdict-map lookup, then one slot-map lookup); iptables " +
  "grows with the rule position (42 µs first, 241 µs last: KUBE-SERVICES is scanned in order).",
];
