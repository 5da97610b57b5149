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
  "**Issue 34, 30k beside kube-proxy (2026-12-05 12:50–13:41, load 1.3; the 30k rows above).** Loading 30k Services and their slices through the API took 28.6 min (10k: 2.4 min). kube-proxy v1.36.2 did not reach a first sync within 300 s in either mode (nftables: 1075 MiB by then, iptables: 1254 MiB); kproxy's nftables mode synced in 18.1–22.0 s (peak 338–344 MiB, one change 45–72 ms), its iptables mode in 80–94 s (peak 508–518 MiB). **The iptables change at 30k, 29–41 s in this run, was the leftover check, and is fixed after it** (commit 4175ff2): after the first full sync the iptables mode looks for the nftables mode's tables (kproxy's, its guard, kube-proxy's, in both families), and `nft -t list table FAMILY NAME` reads every chain of the node in nft 1.0.6: 3.3–6 s each beside 330k iptables-nft chains and 990k rules (measured in a namespace holding kproxy's 30k × 10 iptables rules), eight of them, with the change waiting behind. kproxy now asks for one chain of each table that no table holds (`nft list chain FAMILY NAME kproxy-table-probe`: ~30 ms there) and reads nft's error, which marks the missing object; in the same namespace the whole leftover check (nftables and ipvs modes) now takes 139 ms. The 30k iptables change is not re-measured here (another load of 30k takes half an hour); at 10k it was 289 ms in the 12:32 run, where the check had ended before the change.",
  "**Issue 34, 2026-12-05 12:32: the run above (an idle machine: load 0.8 and 1.0 as the sizes started), after two fixes.** Met: one change in nftables mode at 1k (0.11×: 32 against 294 ms) and 10k (0.01×: 36 ms against 5.34 s), peak RSS in iptables mode at 10k (0.55×: 252 MiB against kube-proxy's 462 MiB when it was stopped at 180 s without a first sync). Missed: peak RSS at 1k (nftables 1.23×: 110 against 90 MiB; iptables 1.21×: 122 against 100 MiB), the nftables first sync at 1k (1.09×: 1.24 against 1.13 s) and at 10k (0.52×: 6.14 against 11.85 s), the nftables RSS at 10k (0.58×: 209 against 359 MiB; its three runs 289, 198 and 209 MiB), the iptables change at 1k (0.52×: 45 against 86 ms; kube-proxy's median was 101 ms in the 10:32 run). (1) **The iptables change at 10k: 2.61 s → 289 ms.** The ipvs mode's leftover check asks iptables-nft for each of its chains by name (`iptables-nft -t TABLE -S CHAIN`: ~10 ms against a 110k-chain nat table; it answers \"incompatible\" for a chain or table that does not exist and creates nothing) and reads a table only when one exists or an answer is unclear (`removeChains`' `names`; unit and kernel tests). For scale: `iptables-nft-save` of a synthetic nat table of 110k chains with one DNAT rule each ran 3 min 40 s and crashed (iptables 1.8.9). (2) **The iptables partial sync no longer walks every service.** An endpoint change rendered every service's entry rules twice (the top-level chains before and after) to find that they had not changed, and the rule gauges summed every chain's count by string prefix; now the changed ports' entry rules alone are compared (the top-level chains are rendered only when those differ; a property test checks that every changed top-level chain is still written, and a unit test the filter-only case) and each table's total is kept as chains change (`rule_counts.ts`). Under the profiler, 5 one-change syncs at 1k: 130 → 95 ms of CPU (27 of them the profiler's). (3) **Where the iptables change at 1k goes now.** iptables-nft-restore 1.8.9 reads every rule of the table (43k in nat at 1k) before it applies any `-A`: in a namespace holding kproxy's 1k ruleset, a restore that only declares, flushes or deletes chains takes 4–7 ms, one that appends a single rule (any target: RETURN, DNAT, a user chain, into a declared or a new chain) 28–31 ms, kproxy's 1.5 KB change input 30–34 ms; starting a process costs ~3 ms from Deno on this VM. So kproxy's 45 ms are that restore and ~12 ms of watch, plan and render, and kube-proxy pays the same restore. What would reach 0.5×: an iptables-nft-restore that fetches only the chains its input names (not in 1.8.9), or shaving the ~12 ms of JavaScript (the watch event's trip through node and web streams, the replan, the metrics); the rules must stay iptables-compatible, so nft cannot write them. (4) **Measured and not adopted** (A/B against the same checkout, fake apiserver, `peak.ts` and `profile.ts`, load ≤ 1.2): one full collection when the last of the concurrent initial lists ends, instead of one per list: 1k first sync 1.16 → 0.97 s but peak 106 → 112 MiB; V8's asynchronous major collection (`gc({type: \"major\", execution: \"async\"})`) per list: no faster (1.14 against 1.15 s); no list collections at 10k: lists 2.37 → 1.56 s but peak 202 → 284 MiB; list pages read from node's response events through a `TextDecoder` instead of web streams: 10k lists 2.28 s, peak 206 MiB (no gain), and with node's `setEncoding` slower (2.86 s); `MALLOC_ARENA_MAX=1` or `2` at 10k: no gain; with 128 KiB trim and mmap thresholds −16 MiB at 10k but the lists +1.4 s. V8's `gc()` runs two mark-compacts whatever its options (`type`, `execution`, `flavor`: measured), so each forced collection costs double. (5) **Where the 10k nftables first sync goes** (this run's logs): ~0.3 s Deno's start, 2.9–3.2 s from the first request to the end of the lists, 2.4–2.5 s to program (plan and render ~0.5 s, `nft -f` 1.9 s). The apiserver serves the same lists to a bare `fetch` in ~1.0 s (Services) and ~1.1 s (slices), pages of 500 (with `resourceVersion=0` in one page: 0.35 and 0.7 s; at 1k both lists take 80 ms, where kproxy's take 0.6 s): kproxy is CPU-bound while listing (at 10k against the fake apiserver 2.25 of 2.34 s busy: garbage collection 0.76 s, `JSON.parse` ~0.5 s, cutting items 0.16 s, web streams 0.15 s, slice validation 0.13 s). `nft -c -f` of the same 5.9 MiB input takes 1.8 s of the load's 1.9 s: nft's own parsing of 131k operations (every endpoint is a map element), not the kernel. So 0.3× (3.6 s) needs the load to overlap the lists or to be split across nft processes; both break the one atomic transaction of a full sync and would need a second table swapped in (briefly both hooked, the newer first, as `tests/kernel/nat_order_test.ts` shows the kernel orders them). The 1k RSS: the trust contract blocks the one step that would reach it, a transport without Node's layer: `Deno.connectTls({ caCerts })` and `fetch` add the CA to the default roots (ARCHITECTURE, \"Apiserver TLS\"), and Deno exposes no peer certificate to check afterwards.",
  "**Issue 34, 2026-12-05, the 10:32 run (an idle machine: load 0.1 and 1.2 as the sizes started; the 12:32 run above supersedes its figures), and why six targets were missed.** Met: one change in nftables mode at 1k (0.11×) and 10k (0.01×), and peak RSS in iptables mode at 10k (0.53× of kube-proxy's 461 MiB when it was stopped at 180 s without a first sync). Missed: peak RSS at 1k in both modes (1.25×: 115 and 126 MiB against 92 and 101), the nftables first sync at 1k (1.08×: 1.31 against 1.22 s) and at 10k (0.46×: 5.87 against 12.65 s), the nftables RSS at 10k (0.57×: 202 against 353 MiB), the iptables change at 1k (0.58×: 59 against 101 ms). On a busy machine (2026-11-28, load 8–12) kube-proxy's nftables first sync at 10k took 34 s: it is bound by `nft` (10.2 of its 12.9 CPU seconds are nft's), kproxy by its own work (4.6 of 6.5), so the ratio depends on the load. The iptables change at 1k: the `iptables-nft-restore` of the changed chains takes 27–37 ms of the 59 (it reads the nat table's ~11k chains into its cache before it applies a 1.5 KB input), the watch, plan and render the rest; kube-proxy's 101 ms hold its own restore. At 10k the iptables change took 2.35–3.06 s against the real apiserver and 0.77–0.93 s against the fake one (below). A kproxy-only run at `-v=4` (11:37–11:42) shows why: the first sync ended at 11:41:25.3, the check for the other modes' leftovers (`takeover`, run after the first full sync, before the next sync) ended at 11:41:32.3, and the change, PUT at about 11:41:28, was synced at 11:41:32.7 (4.3 s in that run). The 7 s are the ipvs mode's `removeChains` (`backends/iptables/cleanup.ts`), which reads `iptables-save` of every table in both variants and families to find ipvs-mode chains, here a 110k-chain nat table. Next step: ask for the ipvs mode's chains by name (their names are fixed), as the nftables tables now are, or run that check off the sync path; the fake-apiserver profile ran its changes later, after the check. (1) **The 62 s iptables change at 10k was the takeover cleanup, not the sync.** After its first sync kproxy looks for the rules other modes left behind; for the nftables mode that was `nft list tables`, and nft 1.0.6 reads every table of the node into its cache before it prints one name, iptables-nft's included: beside 10k Services in iptables mode (110k chains, 320k rules in `ip nat`) it ran into kproxy's 60 s command time-out, and the sync of the endpoint change waited behind it (a kproxy-only beside run at 09:53, under a Kubernetes build: first sync 27.6 s, one change 62.5 s; its log: `Cannot run \"nft list tables\": killed after 60000 ms timeout`). On a namespace holding 30k iptables-nft chains `nft list tables` took 1.7 s, `nft -t list table ip kube-proxy` 0.07–0.12 s whether or not the table exists. kproxy now asks for each table by name (`backends/nftables/table_probe.ts`, also `hand-back`), never for every table. (2) **Per-sync work that walked every service**: a one-change sync at 10k in iptables mode spent its CPU (profile of 3 changes, fake apiserver) on the frontend check (`checkFrontendsHeldOnce` + `heldFrontendKeys`, which copied each service port's plan to drop one field: ~75 ms), chain-name hashing for every service (`sha256` + `hash16`: ~45 ms) and re-rendering the top-level chains (~45 ms), plus ~70 ms of garbage collection; the names are now cached per plan object (the planner keeps an unchanged port's object) and the frontend keys built without a copy, after which three one-change syncs at 10k took 0.77–0.93 s under the profiler (the restore itself: 240–250 ms for a 1.5 KB input on a 110k-chain table; at 1k 41–45 ms). (3) **V8 flags, A/B (fake apiserver, `scripts/bench/peak.ts`, 3 runs each, a niced Kubernetes build beside, load 2–5):** `--optimize-for-size`: nftables 1k peak 99 against 106 MiB, first sync 1.63 against 1.71 s; 10k 181 against 197 MiB but first sync 9.8 against 7.6 s (the lists 5.1–5.5 against 3.8–4.7 s); iptables 1k 117 against 118 MiB. With it the list collections (`list_garbage.ts`) are redundant (10k: 180 MiB, 9.0 s without them). Set at run time (`v8.setFlagsFromString`) it does nothing (234 MiB). `--single-threaded-gc` is worse (1k: 122 MiB), `--max-semi-space-size=2` with it 97 MiB, a list-collection budget of 8 instead of 16 MiB changes nothing at 10k (193 against 193 MiB). Not adopted: it trades the 10k first sync (a target at 0.3×) for the 10k RSS (a target at 0.5×) at about the same margin. (4) **The 1k floor** (`/usr/bin/time`, Deno 2.9.6, a file with one import): a file printing `1`: 31 MiB, 0.16 s; any `node:` built-in (`node:stream`, `node:v8` + `node:vm`, `node:crypto`) or any npm package (`@logtape/logtape`, prom-client's registry): 40–45 MiB, because Deno then starts its Node compatibility layer; `yaml` 47 MiB; kproxy's `lib/commands/app.ts` 56 MiB and 0.23–0.40 s before it sends a request. A profile of a 1k start against the fake apiserver: 65 MiB when the modules are loaded, 89 MiB at the first listed object (TLS, `node:https`, the first page: +9 MiB of the deno binary's pages, +13 MiB of V8 heap and code), 90–107 MiB when the lists end; kproxy's own data at 1k is ~5 MiB. kube-proxy's whole 1k process is about what kproxy holds before its first object. What would reach the 1k targets (≈ 78 MiB in nftables mode and 91 in iptables mode, beside kube-proxy's 92 and 101): no Node compatibility layer at run time — an apiserver transport on `Deno.connectTls` (it must keep the cluster CA as the only trust anchor; not yet checked for `Deno.connectTls`), the Prometheus text format written by kproxy instead of prom-client, logging and YAML without npm packages, the collections without `node:v8`/`node:vm` — an estimated 15–20 MiB, measured nowhere yet. The 1k first sync (≤ 0.7×) is the same story in time: Deno and kproxy's modules take 0.2–0.45 s of a budget of 0.85 s (0.7 × 1.22 s).\n What would reach the 10k nftables targets: the first sync is Deno's start (~0.4 s), the lists (3.1 s from kproxy's start line to the end of the lists in this run's 10k iptables log: the same lists), planning and rendering (~0.5 s) and one `nft -f` (~2.3–2.7 s, \"Full sync\" above); overlapping the load of services already listed with the rest of the lists, and the tracker's and plan's endpoints as typed arrays instead of objects (40 MB live at 10k), are the two steps left, neither started. Not measured in this run: 30k (loading 30k Services and their slices through the API takes ~10 minutes here, and the session's time went to the cluster run of issue 32), ipvs (no IPVS in this kernel).",
  "**Issue 34, profile of the iptables mode, the 1k floor and the apiserver transport (2026-11-28 00:25–01:25 UTC).** Same machine (2 CPUs, AMD EPYC), shared with a Kubernetes build and other sessions: load average 14–20 throughout, so times are 3–13× those of idle runs (a render of 10k × 10 alone took 25–33 s against 1.9 s in the table above); memory is less sensitive, and every comparison below is A against B alternated in the same period (`scripts/bench/peak.ts`: the start-up bench, fake apiserver over HTTPS, realistic objects, kproxy's `main.ts` with the executable's V8 flags unless said). Phases from `scripts/bench/profile.ts --mode=iptables` (kproxy under the CPU profiler, so +5–15 MiB over a bare process); MiB of RSS (peak so far) and V8 heap used/committed:\n\n| iptables-nft, services × 10 | lists done | first input rendered | after the first sync | peak |\n| --- | --- | --- | --- | --- |\n| 1k, before (7d2dc07) | 105 (122), heap 20/25 | 132, heap 39/44 | 139, heap 39/48 | 140 |\n| 1k, inputs rendered as they run | 97 (109), heap 20/25 | 110, heap 25/31 | 126, heap 36/44 | 126 |\n| 10k, before (7d2dc07) | 167 (194), heap 67/75 | 362, heap 180/218 | 269, heap 124/134 | 369 |\n| 10k, inputs rendered as they run | 153 (185), heap 63/73 | 197, heap 80/87 | 293, heap 125/154 | 335 |\n| 10k, + a full collection every 2 MiB of input | 161 (188), heap 65/73 | 208, heap 81/88 | 224, heap 91/99 | 244 |\n| 10k, + chain names hashed in JavaScript (another run, 01:15) | 168 (196), heap 65/73 | 217, heap 79/87 | 236, heap 89/102 | 258 |\n\nWhere the iptables mode's memory went. (1) The render: a full sync rendered every service port's chains as arrays of argument arrays, copied them all once more to rename jump targets (`renamed`), and wrote every rule line into the staging inputs before the first `iptables-nft-restore` ran: at 10k the heap went from 67 to 180 MiB used for a 33 MB input (a 100-byte line costs ~350 bytes of live heap while its rule arrays live). Now `fullSyncInputs` renders each staging input (≤ 2000 chains) only when the one before it ran, `renamed` shares every rule whose jump keeps its name, and the applier keeps no input once it ran (it counts each input's rules per chain as it goes; it used to split every rule line again to count them). (2) Promoted garbage: each input's rules and text survive the scavenges of the next render, are promoted, and waited for V8's next full collection (1k: 36 MiB of heap used after the first sync, 19 MiB live in a heap snapshot); a `GarbageBudget` now runs a full collection every 2 MiB of restore input (or a quarter of all so far), which a one-change sync never reaches. Its price, measured in the same 10k profiles (load 17): V8's `gc()` runs two mark-compacts per call (the second frees nothing; `gc({type: \"major\"})` is the same), so the ~10 collections of a 10k full sync were 37–41 mark-compacts, 14.0–14.3 s of pause against 1.3–5.7 s without the budget, and the first sync took 113–123 s against 60–117 s (every time in these runs is inflated 3–13× by the load; restores alone varied 38–65 s between runs). The iptables targets are memory and one-change time, which the budget does not touch (a one-change input is kilobytes); if a full sync's time matters more, raise `garbage.minBytes` or the share (a doubling budget would make it ~5 collections at 10k). Re-measure on an idle machine. Chain-name hashing in JavaScript, 10k A/B one run each (01:27–01:37): 241 / 235 MiB. All of it against 7d2dc07, 1k × 10 iptables, 2 runs each (01:50–01:51, load 12–13): peak 124, 124 → 114, 117 MiB; first sync 8.8, 7.8 → 6.8, 7.3 s. Every command the backend runs (program, arguments, stdin) and every sync result were compared with 7d2dc07's on a fake executor for both variants over a full sync, a chunked partial sync of every service, a full resync over chains in use (alternate names), a shrinking full sync and a one-endpoint partial sync: identical (543,451 characters of recorded calls). The iptables kernel tests failed 3 of 70 cases in one run at load 15–18 and the partial-sync case again in a filtered rerun, every failure the python client killed after its 6.5 s bound; the same filtered case failed on 7d2dc07 in the same period (1 of 2). A second full run at load 8–11 (01:39–01:49): 69 of 70 steps passed, both partial-sync tests among them; the one failure (legacy, a LoadBalancer source-range drop case, the client killed at 5.7 s) had passed in the first run. (3) Chain-name hashes: `node:crypto`'s `createHash` for the ~110k names of 10k × 10 (one hash object and several runtime calls each) raised a test process from 42 to 85 MiB and took 1.5–8 s; `lib/core/sha256.ts` takes 59 MiB and 0.8–1.7 s there. Not the cause: `iptables-save` readings (a fresh node's tables are a few KiB; they are now parsed and dropped in one helper, and `missingJumps` reads only the built-in chain's lines instead of splitting the table once per jump), nfacct readings (one `nfacct list` of a few KiB per full sync), child stdout buffering (the restores print nothing). A/B peak RSS, real processes: 1k, before / inputs rendered as they run: 125, 125, 125 / 116, 115, 118 MiB (00:36–00:40); inputs as they run / + collections: 134, 116, 116 / 129, 109, 106 MiB (01:00–01:07), first sync no slower; 10k, before / inputs as they run: 366 / 331 MiB (one run each, 00:43–00:50). Goldens, render, backend, cleanup and the iptables kernel tests pass unchanged.",
  "**V8's young generation (measured, issue 34).** The ~70 MiB that the iptables mode cost over nftables at 1k in the runs beside kube-proxy comes mostly from V8's flags, not the mode: those runs started `deno run -A main.ts` without `--max-semi-space-size=4`, and V8 then grows each semi-space to 32 MiB under the first sync's allocation (a test loop of rule arrays: `new_space` 64 MiB without the flag, 10 MiB with it). 1k × 10, iptables, the same checkout A/B at load 14–15: 139 and 123 MiB with the flag, 180 and 167 without. `v8.setFlagsFromString` at run time does not resize the young generation (measured: still 64 MiB), so the flag must be on the command line; the executable had it, but `deno task launch` and the container image (whose launcher is `launch.ts`) did not: they now pass it (`lib/shell/v8_flags.ts`), and README says how to pass it to `deno run` (or `DENO_V8_FLAGS`). A smaller semi-space was measured before (issue 23: `--max-semi-space-size=1`, 1k 105–107 against 110 MiB, no gain at 10k) and is not worth its scavenges.",
  "**The 1k floor (issue 34).** Resident MiB of fresh Deno processes importing a little more each (`scripts/bench/modules.ts` and one-off imports, 00:28): nothing 35; `node:https` 42–44; + `yaml` 48; + `js-yaml` 46; + prom-client's registry, counter, gauge and histogram 47; + `@logtape/logtape` 46; `lib/commands/app.ts` 57; + the kube source and the iptables backend 57; one HTTPS GET through kproxy's transport 65. client-node is already loaded only for exec and auth-provider users, the backends and sources only for the mode in use, js-yaml only for manifests. The `yaml` package is used by the config file and the kubeconfig readers; replacing it by a JSON-only stub in an A/B (nftables 1k, 3 runs each, 01:08–01:11): 101, 102, 98 MiB with it, 118, 101, 104 without: no gain above the noise, so nothing was changed there. What remains at 1k is the runtime: the deno binary's resident pages (31 MiB at start, 45–47 MiB once TLS, `node:https` and the JIT ran), V8's heap (25–31 MiB committed), glibc's heap (22 MiB after the lists). kproxy's own data at 1k is ~5 MiB. Targets of 80 MiB (iptables) and 87 MiB (nftables) at 1k are not reachable with this runtime: the process with its modules and one HTTPS request is at 65 MiB before it lists anything. Next steps, each measured before adopting it: prom-client (CommonJS, ~3–5 MiB with Node's module loader) replaced by a small text-format writer; the list pages read through a `Deno.connectTls` transport instead of `node:https` (if it can make the cluster CA the only trust anchor).",
  "**Apiserver transport: protobuf (issue 34, measured, not adopted).** `scripts/bench/protobuf_size.ts` encodes the bench's realistic objects as Kubernetes' protobuf (field numbers of `generated.proto`, the `k8s\\0` envelope) in pages of 500 and compares them with the same pages as JSON (01:10, load 15): Services 1k 2.09 → 1.59 MiB (76 %), 10k 20.9 → 16.0 MiB; EndpointSlices × 10 1k 4.17 → 2.49 MiB (60 %), 10k 41.7 → 25.0 MiB. Reading every page: `JSON.parse` 1020 ms (Services, 10k) and 2309 ms (slices), a JavaScript protobuf walk that decodes only kproxy's fields and skips managedFields, annotations and ownerReferences by their length 624 ms and 2535 ms. So protobuf would carry 24–40 % fewer bytes (the page buffers the list collections free), but decoding it in JavaScript is not faster than V8's native `JSON.parse`, and kproxy's list reading is not bound by bytes on this machine. Decision: JSON stays; not worth a decoder now. To confirm on the real kube-apiserver (these are estimates: Go's marshallers also write empty fields): `curl -H 'Accept: application/vnd.kubernetes.protobuf'` of `/api/v1/services?limit=500` and `/apis/discovery.k8s.io/v1/endpointslices?limit=500` against the JSON sizes.",
  "**Start-up to the first iptables sync (issue 34).** In the 10k profiles the render's CPU (under load 17) was the garbage collector 4.0 s, `renderServiceChains` 2.1 s, `node:crypto` hashing 0.5 s, the restore script 0.5 s, and the 57 inputs' `iptables-nft-restore` runs 40–80 s of wall time (0.3–2 s each); the lists 7–16 s. The hashing is gone (above) and rendering each input just before it runs shortens the time to the first input; the restores, quadratic in the chains already in the table, are the rest. Next step: render the next input while `iptables-nft-restore` reads the one before (needs the executor to say when stdin is written).",
  "**Issue 23, memory pass (2026-11-26 04:40–05:10).** Start-up and memory (nftables, 1k, 10k, 100k; 3 runs each) were re-measured at 04:58–05:09 (`--only=memory --modes=nftables --runs=3`) while other sessions loaded the 2 cores (load average 2.8–5.1, an iptables storm bench among them); every other figure is from earlier runs. What filled glibc's heap during the lists was dead list-page buffers. `node:https` hands each page over as `Buffer`s whose bytes are malloc'd outside V8's heap (64 KiB pieces and ~2 MB runs); they live long enough to be promoted while pages are decoded and parsed, and only a full collection frees them, which V8 starts from its own heap's growth, not from these bytes. Streaming the 63 MB of list pages of 10k × 10 through `node:https` and dropping every byte peaked at 161–194 MiB (51 MiB for the same process without requests); with a full GC after each page 91 MiB, with a minor GC 106–114 MiB, through `fetch` 108–114 MiB (which cannot make the cluster CA the only trust anchor, see ARCHITECTURE). kproxy now runs a full collection each time a quarter of all bytes listed so far (at least 16 MiB) was read, and at the end of each list (`lib/shell/list_garbage.ts`); V8's `gc` is reached at run time (`v8.setFlagsFromString('--expose-gc')`, then a `node:vm` context), so no deployment has to carry a flag. A/B in the same period, kproxy at 10k: 231/233/237 MiB before, 203/209 with the budget alone, 183/187 with the collection at each list's end too; at 1k 99/99/99 MiB against 107/108/111. Its price is CPU: 7 collections at 10k took 1.37 s of wall time at load 6 (135–270 ms each); a collection after every page gave 173–176 MiB but about 1.5× the start-up. Tried and not kept: a 2 MiB minimum budget (10k: 180–185 MiB for 12 collections; 1k: 97–100 MiB, 92–96 with `--max-semi-space-size=1`), `--max-semi-space-size=1` alone (10k: no gain), `MALLOC_ARENA_MAX=2` at 1k (107–109 MiB against 110–113), running the bundle `dist/kproxy.js` instead of `main.ts` at 1k (109–123 MiB against 110–113: no gain).",
  "**Issue 23, optimisation pass (2026-11-26 03:40–05:00).** Memory, start-up and one change " +
  "(nftables, 1k, 10k, 100k) were re-measured at 04:15–04:29 (`--only=memory,change --modes=nftables`) while three other sessions loaded " +
  "the 2 cores (load average 3.3–5.9); every other figure is from the run of 03:17. Each " +
  "change was measured A against B in the same period. (1) List pages are cut into item texts " +
  "(`lib/core/parse/list_page.ts`, anything it does not follow goes to `JSON.parse` whole) and " +
  "each item is parsed on its own, so a page's raw objects (managedFields and all) are garbage " +
  "as soon as each is read instead of being promoted to V8's old generation with the whole " +
  "page; the source keeps only each object's resourceVersion, not a stub object (anatomy at " +
  "10k: 8.5 → 3.2 MiB). Peak RSS at 10k, 3 runs each at load ~4: 275 MiB (235–282) before, 235 " +
  "MiB (213–240) after. Its price is CPU: cutting a 2 MB page costs about half its " +
  "`JSON.parse` (14–22 ms against 31–37 ms per page in a micro-benchmark), ~0.5 s more at " +
  "10k. (2) The tracker's copy-on-write maps copied the whole map (100k services, 100k slice " +
  "groups) on the first write after each drain; `SnapshotMap` (`lib/core/snapshot_map.ts`) " +
  "keeps a shared base and the changes since its last fold. One endpoint change at 100k, end " +
  "to end, A/B at load 3–5: 254 ms (sync 83 ms) before, 69 ms (sync 67 ms) after; the " +
  "130 ms of the 03:17 run were mostly that copy, made before the tracker even timed the " +
  "change. (3) The nftables incremental render and the conntrack check found the changed " +
  "service ports by walking both plans; they now use binary search (`findServicePort`): 36 ms " +
  "at 100k (1k: 38 ms), the target met. (4) Node and zone names of endpoints are shared " +
  "strings: `JSON.parse` gives every string longer than 10 characters its own copy, ~50 B per " +
  "endpoint with real node names; the bench's names (node-a, node-b) are short enough for V8 " +
  "to share already, so the bench does not show it.",
  "**Peak RSS at 1k (101 MiB, 3 runs 99–104 at 04:58; 111 MiB at 04:15 before the memory pass; target 90 MiB: missed).** At 1k the lists are ~6 MB, below the collection budget, so only the collections at each list's end run; what is left is the floor. The floor is Deno itself: a process " +
  "with kproxy's modules and one HTTPS GET through its transport holds 64 MiB " +
  "(`scripts/bench/modules.ts`: 34–38 MiB of it the deno binary's resident pages, 14 " +
  "anonymous, 6.5 malloc), and 1k services' data is ~5 MiB of live heap. A profile of a start " +
  "at 1k (`scripts/bench/profile.ts --services=1000`): the binary grows to 45 MiB resident as " +
  "more of it runs, V8's heap to 31–34 MiB committed (25 used) and glibc's heap from 15 to " +
  "23–31 MiB during the lists, where it stays. Tried at 1k (3 runs each): " +
  "`--max-semi-space-size=1` 105–107 MiB against 110, `--optimize-for-size` 100–103 MiB but " +
  "start-up +50%, `MALLOC_ARENA_MAX=2` with 128 KiB trim and mmap thresholds 107–108 MiB (at " +
  "10k 207–225 against 221–242; not shipped, every deployment would have to set it). None " +
  "reaches 90 MiB: what stands in the way is the runtime (binary pages, allocator arenas, V8's " +
  "minimum heap), not kproxy's data. Next step: a build with a smaller binary (no npm " +
  "compatibility layer: node:http/https are loaded for the apiserver transport) or a different " +
  "allocator; measure `deno compile`'s executable, not `deno run`.",
  "**Peak RSS at 10k (187 MiB, 3 runs 184–195 at 04:59; 244 MiB at 04:15 before the memory pass; target 150 MiB: missed).** Of the 65–80 MiB of glibc heap below, ~45 MiB were dead list-page buffers, now collected (memory pass above); what stands in the way now is the floor (64 MiB), the live data (tracker 26 MiB, plan 16 MiB, resourceVersions 3.5 MiB) and V8's heap slack over it, and the page buffers still alive between two collections. Profile at 10k, before that pass: the peak comes " +
  "with the lists (heap 85–107 MiB used, 92–116 committed) or the first sync (+15–30 MiB: plan " +
  "and render); of the heap, what lives is the tracker's validated objects (26.3 MiB: " +
  "2760 B per service, two thirds of it the 10 endpoint objects and their address strings), " +
  "the plan (15.8 MiB), the source's resourceVersions (3.5 MiB) and the nftables transaction " +
  "while nft reads it (6 MiB); glibc's heap holds 65–80 MiB that it does not give back after " +
  "the lists. That part grows with the listed bytes: it was the response buffers, dead but not " +
  "collected (decoding bodies piece by piece could not free them). Next steps: packed endpoints (typed arrays of addresses and flags per slice, " +
  "shared by tracker and plan: ~25 MiB at 10k), streaming the full render into nft without " +
  "holding the transaction, and reading list pages without `node:https`'s buffers (`fetch` held " +
  "~55 MiB less for the same bytes, but its client cannot drop the default roots; a transport " +
  "over `Deno.connectTls` would need the same trust contract) so no collection is needed.",
  "**Peak RSS at 100k (892 MiB, 3 runs 882–905 at 05:00–05:09, lists done at 702 MiB; 1072 MiB at 04:15 before the memory pass; target 1 GiB: met).** Start-up to the first sync 85.7 s (108.8 s before, at a higher load): the ~18 collections the budget runs at this size (about 630 MB listed) did not show as a slowdown. Profile at 100k before that pass (04:00, " +
  "load 5–6): 912 MiB at the end of the lists (heap 691 MiB used, glibc's heap 242 MiB), " +
  "in the bench 852–892 MiB at the end of the lists and 180–210 MiB more after the first sync; " +
  "1074 MiB once the 56 MiB nft input was rendered (plan ~160 MiB, transaction ~60 MiB). The " +
  "same next steps as at 10k apply; the plan and the transaction are the largest movable " +
  "parts here.",
  "**nftables full sync at 100k (31.25 s in the run of 03:17; target 30 s: missed by the " +
  "noise).** Not re-measured: nothing in the render or the load changed. Rendering is 2.8 s; " +
  "the rest is nft parsing 1.2 million element operations (56 MiB of input) and the kernel " +
  "inserting them, linear in services (313 µs per service at 100k, 302 at 10k); single loads " +
  "of the same input vary by ±25% on this machine. Next step: fewer elements per endpoint " +
  "(the slot map holds one element per endpoint and the hairpin set one per local endpoint; " +
  "the rest is per service).",
  "**Start-up to first sync at 10k (11.4 s at 04:59, load ~5, when the fake apiserver took 3.0 s to serve one list; 9.1 s at 04:15; 5.4 s at 03:17; target 2 s: missed).** An A/B at load ~1.5 (05:36–05:38, `--only=startup --sizes=10000 --runs=2`, alternating): before the optimisation and memory passes (28735d8) 5.6 and 6.1 s to the first sync, lists done at 2.4 s, peak 258 MiB; after them (1299b82) 7.4 s, lists done at 3.4 s, peak 207 MiB: the memory work trades ~1 s of listing (cutting items, ~7 full collections) for ~50 MiB at 10k. The memory pass added ~7 full collections during the lists (1.37 s of wall time at load 6, about half that on an idle machine by their CPU share). The fake apiserver " +
  "alone takes 1.8–2.7 s to serve one paged list of the cluster (last column of the start-up " +
  "table) and the first nftables load 2.3–3.1 s (10k × 10, full sync table), so no client " +
  "reaches 2 s against it on this machine; kube-proxy 1.36 took 11.2 s. kproxy's own share " +
  "in the profiles at 10k (load ~4) is 2.1–3.8 s of CPU while the lists run (reading the " +
  "responses, cutting and parsing items, validating, GC; cutting adds ~0.5 s, see above) and " +
  "0.7–0.8 s of planning and rendering. Next step: start the nft load of services " +
  "already listed while the lists go on (the first sync would then be several).",
  "**iptables event storm at 10k (re-measured 2026-11-26 05:09–05:13, load 4.5–6 while other " +
  "sessions ran; 176.6 s to converge, 1 sync, 0 full; target: chunked partial syncs, no full " +
  "sync: met; converging faster than the chunked full sync: not shown).** A partial sync that " +
  "declares more chains than one iptables-nft-restore input should hold (2000) is now chunked " +
  "itself (`renderPartialSync` in `backends/iptables/partial.ts`): new and differing chains are " +
  "staged under names no rule uses yet, one commit switches KUBE-SERVICES & co., and the old " +
  "spellings are deleted after, callers first; unchanged endpoint chains keep their names. " +
  "Partial syncs by size (table above): 1000 changed services in 6.6 s (one staging, one commit and one " +
  "cleanup input), 0.7–0.9 s up to 100 in one input. The storm coalesced into one sync of all 10k services " +
  "(20k chains written, 20k deleted, 21 inputs, the longest 12.0 s); a first version that moved " +
  "every chain of a changed service took 144.3 s (04:54, 1 sync, 0 full), the chunked full sync " +
  "130.0 s (04:24). Measured alone at 05:15 (the backend on a loaded 10k × 10 table, " +
  "`benchPlan`/`moveEndpoints`), one partial sync of all 10k services takes 57.6 s: 10 staging " +
  "inputs of 2000 chains at 3.8–5.5 s each (into an empty table such an input takes 0.3–0.5 s: " +
  "the 110k chains already there cost the rest), the commit 2.0 s, 10 cleanup inputs of ~0.1 s; with 7000 chains per input " +
  "it had not finished after 340 s (quadratic). So two thirds of the storm's 176.6 s lie outside " +
  "the restores. Next step: time the storm's sync by phase (planning, render, each input) in " +
  "the bench, which keeps only the longest command.",
  "Runs of 2026-11-23. The nftables full syncs (median of three fresh namespaces each), the " +
  "one-change sections of both modes, start-up, memory and both storms were re-measured at " +
  "16:29–16:48, after the memory work described below; the data path at 15:13; the iptables " +
  "full syncs come from the runs of 12:27–13:19 (dates below). kproxy runs with the V8 flags " +
  "of the compiled executable. The bench cluster puts one endpoint in 1000 on the node under " +
  "test (300 at 30k × 10, a full node's worth).",
  "**nftables full sync (10k: 2.2 s, 30k: 8.4 s; targets 3 s / 12 s: met).** Until the slot maps " +
  "each service port had a chain of E `numgen … dnat to ep_j` rules: 330k rules at 30k, which " +
  "nft parsed for ~6 s and the kernel built for ~7 s (17.4 s in all, 4.9 s at 10k). Endpoints " +
  "are now elements of one global slot map (`daddr . proto . port . slot → ep . port`) read by " +
  "a few chains shared by every service port with the same endpoint count, each one `dnat … " +
  "numgen random mod E map` rule. A trial with one such rule per service instead (30k rules " +
  "binding the same map) took 146 s at 30k: the kernel checks every earlier binding of a map " +
  "when a rule binds it. Single loads of the same script varied by ±25% on this machine " +
  "(2.1–3.3 s at 10k), hence the median. Rendering is 0.3–0.5 s / 1.3 s of it; the rest is nft " +
  "parsing 330k elements and the kernel inserting them. Session-affinity and " +
  "externalTrafficPolicy Local services keep per-service chains: the 10%-affinity column shows " +
  "their cost (3.4 s at 10k).",
  "**One endpoint change (1k: 34 ms, 10k: 33 ms, 30k: 43 ms end to end; target ≤ 100 ms flat: " +
  "met).** The transaction deletes and re-adds the changed slot elements (and, for a local " +
  "endpoint, two hairpin elements): no rule is replaced, so the kernel does not re-validate the " +
  "table, and nft's cache fill is small because the table now has ~300 chains, not 30k (the " +
  "floor column: 12–20 ms at every size, was 121 ms at 30k). Before: 544 ms at 30k. A " +
  "change of endpoint count moves the dispatch element to another shared chain: measured by " +
  "hand on the loaded 30k table, that transaction also takes ~10 ms. The rest " +
  "at 30k is ~10 ms of bookkeeping that still walks every service (indexing the plans, the " +
  "hairpin check when a local endpoint goes away). The backend's one-change column is higher " +
  "(97 ms at 30k) because it runs right after the 300k-element load, while the kernel is still " +
  "settling it. Limits: a change to an endpoint count above 64 that no service uses yet takes " +
  "a full sync (nft 1.0.6 cannot add a rule reading a slot map already in the kernel), and a " +
  "local endpoint going away costs ~20 ms more at 30k for the hairpin check.",
  "**Peak RSS (10k/100k: 180 MiB = 188 MB; 30k/300k: 361 MiB; target ≤ 200 MB: met).** Was " +
  "274 MiB (530 MiB at 30k) in the run before. Three changes. (1) client-node's entry module " +
  "loads every generated API model: 80 MB of RSS and ~1 s before kproxy did anything (the " +
  "floor row: 117 MiB with it, 55 MiB without). kproxy now reads kubeconfigs and the service " +
  "account itself and imports client-node only for exec-plugin and auth-provider users. (2) " +
  "List pages reach the tracker as they arrive instead of being gathered first; an object " +
  "already known at the same resourceVersion is not upserted again, so a list restarted " +
  "after its continuation expired repeats nothing. (3) The nftables render joins element " +
  "texts into lines of 1000 as it goes, and the script reaches nft's stdin in 64 KiB pieces, " +
  "never as one 6 MB string plus its 6 MB UTF-8 copy; planning allocates 63 MB instead of 88 " +
  "(endpoints merged by a stable sort, not a map of wrappers). Sampled at phase boundaries " +
  "at 10k: the lists end at 94 MiB of anonymous memory (heap 61 MB, of which the tracker " +
  "holds 26 MB live), planning adds ~20 MiB, the render ~6; at the end V8's heap is 82 MB " +
  "and 38 MB lie outside it. Six runs gave 163–180 MiB. Next step if the target tightens: " +
  "the tracker's and the plan's endpoints (40 MB live at 10k) are plain objects; packing " +
  "them into typed arrays would roughly halve that.",
  "**Start-up to first sync at 10k (4.5 s; target 5 s: met).** Deno and kproxy's modules: " +
  "0.13 s (0.55 s while client-node loaded); listing from the fake apiserver and parsing: " +
  "~1.1 s (serving alone: 0.5 s); planning 0.15 s; rendering 0.4 s; the full nftables load " +
  "~2.3 s.",
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
  "**Event storm (re-measured 16:38–16:48).** nftables: 10,000 changes in 9.9 s went out in " +
  "132 partial syncs, each at most 151 ms of rule load; the last change was in the kernel " +
  "10.0 s after the first, as the last one was sent; nothing lost (was 28 syncs of up to " +
  "0.7 s before the slot maps: each element-only sync is cheap enough that the runner no " +
  "longer needs to coalesce). iptables: a partial sync that declares more chains than one " +
  "`iptables-nft-restore` input should hold (it is quadratic in its chains; the first storm " +
  "of this day hit the 300 s command timeout) becomes the chunked full sync: the storm took " +
  "3 syncs (2 full), the longest command 4.4 s, the last change in the kernel 110 s after " +
  "the first (was 373 s), nothing lost. Partial syncs are now chunked themselves (2026-11-26: " +
  "no full sync, 176.6 s; see the issue 23 paragraph above).",
  "**Atomic loads (A/B of 2026-11-26 on this machine while other work ran, load 4–6).** " +
  "nftables at 10k × 10, median of 6 fresh namespaces each: full sync 4.32 s before the " +
  "load guard, 4.35 s with it (it adds one small nft batch before each full sync, two " +
  "before the first, and two lines to every input); one-change sync unchanged (38–56 ms, " +
  "noise). iptables-nft at 10k × 10, two runs each: first full sync unchanged (23–28 s " +
  "before, 27 s after); the one-change input is byte for byte the same; a full sync over " +
  "chains already in the kernel (restart, hourly resync, storm) 53–58 s before, 68–70 s " +
  "after: its staging inputs now fill fresh chains beside the live ones instead of " +
  "rewriting those in place, and the 110k chains left behind are then deleted in 2000-chain " +
  "inputs. Legacy, which never chunks, is unchanged.",
  "**Data path (re-measured 15:13).** nftables connect latency is flat (43 µs for the first " +
  "and the last of 10k services: one verdict-map lookup, then one slot-map lookup); iptables " +
  "grows with the rule position (42 µs first, 241 µs last: KUBE-SERVICES is scanned in order).",
  "**Takeover and hand-back (measured 2026-11-26, 01:06–01:09, `--only=takeover`).** No " +
  "connection failed in any of the 20 runs; the longest gap per target was 43–120 ms against a " +
  "30 ms period, with no difference between starting from kube-proxy's nftables or iptables " +
  "rules. kproxy now writes its own complete ruleset first and only then removes the other " +
  "modes' rules (kube-proxy's nftables tables in the same `nft -f` as its first write); its " +
  "full sync re-creates its table, so its nat chains, registered last, decide while " +
  "kube-proxy's still exist (tests/kernel/nat_order_test.ts). Before that change the same " +
  "scenario lost 2 of ~262 connections per run from kube-proxy iptables (nft and legacy: one " +
  "refused, one timed out), the gap issue 26 measured, and left kube-proxy's nftables table in " +
  "place. Not measured: a switch from kube-proxy's ipvs mode (this kernel has no IPVS).",
  "**Manifests: `kproxy plan` on a 10k × 10 dump (measured 2026-11-26 01:53–02:02 while other " +
  "sessions loaded the 2 cores, load average 4–7; 300 MB met but by the YAML List, 306 MB; " +
  "2 s missed).** Before is " +
  "a4af0a1: the yaml library parsed each file whole (`parseAllDocuments`), JSON files too, " +
  "and the plan was printed through a copying replacer: multi-document YAML 53 s / 938 MiB, " +
  "`kubectl get -o yaml` List 37 s / 1762 MiB, `kubectl get -o json` List 46 s / 2279 MiB " +
  "here (27.2 s / 949 MiB and 35.2 s / 2.2 GiB for YAML and JSON at load 0.2). After: 10.1 s " +
  "/ 279 MiB, 8.7 s / 292 MiB, 3.6 s / 243 MiB; farm-bench at load ~4.5 (3 runs): YAML 4.7 s " +
  "wall / 4.4 s CPU, JSON 4.3 s / 2.5 s CPU. In-process split (noisy): js-yaml 0.9–1.9 s for " +
  "the 20k documents parsed one at a time, `JSON.parse` of the 49 MB List 0.3–0.6 s, each " +
  "object's JSON for change detection 0.2 s, the tracker 0.45–0.9 s, planning 0.2–0.5 s, " +
  "writing the 64 MB plan 1.2–2 s under load (the same as the old replacer, without its " +
  "~130 MB). Why js-yaml and not the yaml library's streaming API: its Parser reads " +
  "`process.env.LOG_TOKENS` once per token, a runtime call in Deno; streamed through its " +
  "Composer the 18.8 MB dump took 14.7 s, 8.0–10.2 s with `process.env` swapped for a plain " +
  "object during the parse, and its lexer alone 2.4 s, so it cannot reach 2 s; js-yaml 5.5.0 " +
  "(already in the lock through client-node) parses it in 1–2 s. A `kubectl get -o yaml` " +
  "List is cut at its `items:` block and parsed entry by entry (542 → 306 MB). Next steps: " +
  "the tracker's per-object validation, and writing the plan (a 64 MB text).",
  "**Conntrack reconcile (measured on its own, 2026-11-26 02:21 and 02:33, under a load of " +
  "3–5 on the 2 cores; target ≤ 200 ms at 100k entries / 10k UDP Services: missed, 1.2–1.5 s).** " +
  "Where it goes: the `conntrack -L -f ipv4 -p udp` process takes 0.75–1 s. conntrack-tools " +
  "1.4.7 asks the kernel for the whole family and filters the protocol itself, so the kernel " +
  "fills all 100k entries into netlink messages (a bare dump that prints nothing: ~0.5 s; " +
  "~0.28 s when the kernel filters UDP itself with `CTA_FILTER`, which 1.4.7 never sends), and " +
  "the tool then parses them and prints the 50k UDP lines. kproxy reads those lines as they " +
  "come and checks each against the Plan (one Map miss for a flow that is not Service " +
  "traffic): 0.1–0.3 s more. Deleting costs more than listing: `conntrack -R` runs each `-D` " +
  "line as one more dump of the table filtered in user space (1.4.7 deletes nothing by " +
  "tuple), so every stale (frontend, endpoint) pair adds 0.4–0.75 s (10 pairs: 5.5–8.7 s); one " +
  "`conntrack -D` per entry would cost that per entry (1000 of them took 8 minutes here, " +
  "while the entries expired). The first listing grows kproxy's RSS once by 20–45 MiB (V8 " +
  "sizing its young generation for the streamed text), later ones by ~0; the JS heap returns " +
  "to its size. Nothing runs after a sync that changed only TCP Services. Next step: a small " +
  "netlink client (Go or C, a few hundred lines, run under the same argument policy as " +
  "`conntrack` today) that asks for UDP only and deletes by tuple: about 0.3 s of kernel time " +
  "at this size and no extra walk per stale pair. Deno itself can speak netlink only through " +
  "FFI, which its permissions cannot confine.",
];
