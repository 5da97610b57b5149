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
  "Runs of 2026-11-23. The nftables full-sync, one-change, start-up and memory sections were " +
  "re-measured at 14:11–14:16 on an otherwise idle machine (load average ~0.7), after the " +
  "hairpin set was limited to endpoints that can hairpin on this node; the bench cluster now " +
  "puts one endpoint in 1000 on the node under test (300 at 30k × 10, a full node's worth). " +
  "The iptables rows, storm and data path come from the runs of 12:27–13:19 (dates below).",
  "**nftables full sync (10k: 4.9 s, 30k: 17.4 s; targets 3 s / 12 s).** Rendering is 0.4 s / " +
  "1.1 s of it. Until this run the hairpin set held `ep . ep` for every endpoint of the " +
  "cluster (300k elements at 30k): 2.2 s of each 30k load, and 5.3 s and 300 MB for any " +
  "`nft list chain`, since nft 1.0.6 fetches every set's elements first. A remote endpoint's " +
  "own traffic to a service is DNATed on its own node, so only local endpoints (and those of " +
  "unknown node) are listed now: 30k went from 19.5 s to 17.4 s and listing a chain from 5.3 s " +
  "to 0.35 s, which made the skeleton drift check affordable. What remains is nft itself: " +
  "loading the 30k script alone takes ~12.7 s (5.9 s user: nft's parser and evaluator on 360k " +
  "lines; 6.8 s system: the kernel building 30k chains and 300k rules). Shortening chain names " +
  "to `svc-HASH` saved 1.7 s (not adopted: the readable names match upstream's nftables mode " +
  "and are what operators grep for). Next step: one dnat rule per service instead of one per " +
  "endpoint, in a layout that keeps the commit cheap (the anonymous-map layouts in facts.md " +
  "are 5× slower).",
  "**One endpoint change (1k: 37 ms, 10k: 133 ms, 30k: 544 ms end to end; target ≤ 100 ms " +
  "flat).** The rule load is 530 ms of the 544 ms at 30k; planning and rendering are under " +
  "15 ms, and the transaction touches only the changed service's chain (and, for a local " +
  "endpoint, two hairpin elements). The load has two parts, measured on the loaded 30k table: " +
  "(1) a floor that any `nft -f` pays, even one that only flushes the one-element canary set " +
  "(the floor column: 24 / 57 / 121 ms) — nft 1.0.6 dumps every chain of the table into its " +
  "cache first; (2) the rest when the replaced rules hold `dnat` (replacing them with " +
  "`counter` rules costs only the floor): the kernel re-validates the whole table at commit " +
  "when a rule with a validating expression is added. No newer nftables is packaged for this " +
  "Debian release (bookworm-backports has none). Next steps: make endpoint replacements " +
  "element-only (dnat targets in data maps, which add no verdicts and need no validation), " +
  "which needs a layout that does not bind a map per service (each bound map costs at load, " +
  "facts.md); or an nft with cache filtering (1.0.7+).",
  "**Peak RSS (10k/100k: 375 MiB; 30k/300k: 701 MiB; target ≤ 200 MB).** The floor (Deno + " +
  "client-node) is 116 MiB. `lib/source/kube.ts` `#list` keeps every page of raw JSON until the " +
  "whole list is in, then hands it to the tracker, which parses it into the model: at peak the " +
  "raw objects, the parsed state, the first plan and the rendered nft script (tens of MB of " +
  "text) are all alive. Next steps: emit upserts page by page (keep only keys for the relist " +
  "delete pass), and render the first sync as a stream of chunks written to `nft`'s stdin " +
  "instead of one string; load only the kubeconfig part of client-node (`KubeConfig` alone " +
  "pulls the whole generated API, ~118 MB RSS per facts.md).",
  "**Start-up to first sync at 10k (7.9 s; target 5 s).** Deno + client-node start: 0.7 s; " +
  "listing from the fake apiserver: 0.5 s; the full nftables load: ~4.5 s (see above); the rest " +
  "is parsing and planning 10k services. It follows the full-sync fix and the memory fix above.",
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
  "**Event storm (re-measured 12:59–13:19).** nftables: 10,000 changes in 9.9 s coalesced " +
  "into 28 partial syncs, the last change in the kernel 0.7 s after the last send, nothing " +
  "lost. Checking the result by reading the ruleset back (`nft list ruleset`) takes minutes at " +
  "10k services — the upstream pain kproxy avoids by keeping its own record. iptables: the " +
  "first run of this day put thousands of changed services into one partial " +
  "`iptables-nft-restore` input, which is quadratic in its chains and hit the 300 s command " +
  "timeout (retried, nothing lost). A partial sync that declares more chains than one chunk " +
  "now becomes the chunked full sync: the storm then took 4 syncs (2 full), the longest " +
  "command 3.1 s, the last change in the kernel 107 s after the first (was 373 s), nothing " +
  "lost. Next step: chunk partial syncs themselves, so a storm costs what changed.",
  "**Data path (re-measured 13:11).** nftables connect latency is flat (52 µs for the first " +
  "and the last of 10k services: one verdict-map lookup); iptables grows with the rule " +
  "position (73 µs first, 280 µs last: KUBE-SERVICES is scanned in order).",
];
