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
  "Runs of 2026-11-23. The full-sync and one-change sections were re-measured at 12:27–12:56 " +
  "on an otherwise idle machine (load average ~1); start-up, memory, storm and data path come " +
  "from the earlier run of 10:21, when other engineers' soak and kernel tests shared the 2-core " +
  "machine (load average ~3), unless their date below says otherwise.",
  "**nftables full sync (10k: 4.7 s, 30k: 19.5 s; targets 3 s / 12 s).** Rendering is 0.5 s / " +
  "2.2 s of it. Loading the 30k script alone: `nft -f` 17.5–18.8 s, of which 9.8 s user time " +
  "(nft's parser and evaluator on 360k lines) and 9.0 s system time (the kernel building 30k " +
  "chains and 300k rules); `nft -c` of the same script costs 16.9 s, so nearly all of it is " +
  "spent before the commit. The hairpin set (one element per endpoint) is 2.2 s of the 17.5 s; " +
  "shortening chain names to `svc-HASH` saved 1.7 s (not adopted: the readable names match " +
  "upstream's nftables mode and are what operators grep for). facts.md measured this layout at " +
  "2.9 s / 10.3 s on its machine with fewer objects per service (no masquerade rule, no hairpin " +
  "set). Next steps: one dnat rule per service instead of one per endpoint (needs a layout that " +
  "keeps the commit cheap: the anonymous-map layouts in facts.md are 5× slower), and the hairpin " +
  "check as one rule per service on `ct original` instead of a set element per endpoint.",
  "**One endpoint change (1k: 42 ms, 10k: 162 ms, 30k: 505 ms end to end; target ≤ 100 ms " +
  "flat).** The rule load is 436 ms of the 505 ms at 30k; planning and rendering are under " +
  "50 ms, and the transaction touches only the changed service's chain and two hairpin elements. " +
  "The load has two parts, measured on the loaded 30k table: (1) a floor of ~0.2 s that any " +
  "`nft -f` pays, even one that only flushes the one-element canary set — nft 1.0.6 dumps " +
  "every chain of the table into its cache first (≈100 netlink reads of 1.5 ms for 30k " +
  "chains); the bench's floor column shows it growing with the table (12 / 41 / 122 ms); " +
  "(2) ~0.2 s more when the replaced rules hold `dnat` (replacing them with `counter` rules " +
  "costs only the floor): the kernel re-validates the whole table at commit when a rule with " +
  "a validating expression is added. No newer nftables is packaged for this Debian release " +
  "(bookworm-backports has none). Next steps: make endpoint replacements element-only (dnat " +
  "targets in data maps, which add no verdicts and need no validation), which needs a layout " +
  "that does not bind a map per service (each bound map costs at load, facts.md); or an nft " +
  "with cache filtering (1.0.7+).",
  "**Peak RSS (10k/100k: 417 MiB; 30k/300k: 833 MiB; target ≤ 200 MB).** The floor (Deno + " +
  "client-node) is 116 MiB. `lib/source/kube.ts` `#list` keeps every page of raw JSON until the " +
  "whole list is in, then hands it to the tracker, which parses it into the model: at peak the " +
  "raw objects, the parsed state, the first plan and the rendered nft script (tens of MB of " +
  "text) are all alive. Next steps: emit upserts page by page (keep only keys for the relist " +
  "delete pass), and render the first sync as a stream of chunks written to `nft`'s stdin " +
  "instead of one string; load only the kubeconfig part of client-node (`KubeConfig` alone " +
  "pulls the whole generated API, ~118 MB RSS per facts.md).",
  "**Start-up to first sync at 10k (8.3 s; target 5 s).** Deno + client-node start: 1.2 s; " +
  "listing from the fake apiserver: 0.6 s; the full nftables load: ~4.7 s (see above); the rest " +
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
