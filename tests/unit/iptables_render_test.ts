import assert from "node:assert/strict";
import { renderFull, renderFullSync, type SyncInputs } from "../../backends/iptables/render.ts";
import {
  isLargeCluster,
  LARGE_CLUSTER_ENDPOINTS,
  probability,
} from "../../backends/iptables/service_chains.ts";
import { masqueradeMark } from "../../backends/iptables/rules.ts";
import { parseSavedChains } from "../../backends/iptables/save.ts";
import { renderCleanup } from "../../backends/iptables/cleanup.ts";
import { renderPartialSync } from "../../backends/iptables/partial.ts";
import {
  alternateChainName,
  endpointChainName,
  serviceChainNames,
} from "../../backends/iptables/names.ts";
import { chooseVariant, summarizeSave } from "../../backends/iptables/detect.ts";
import { IptablesRestoreScript } from "../../backends/iptables/script.ts";
import type { Plan, PlanEndpoint, ServicePortPlan } from "../../lib/core/plan.ts";
import {
  endpoint,
  GOLDEN_CASES,
  plan,
  servicePort,
  traffic,
  uniformCluster,
} from "../golden/iptables/fixtures.ts";

/** The switching input of a sync: chains declared and deleted in each table, and its text. */
function commitOf(sync: SyncInputs) {
  const blocks = sync.commit;
  return {
    nat: blocks.flatMap((block) => block.chainNames("nat")),
    filter: blocks.flatMap((block) => block.chainNames("filter")),
    deleted: blocks.flatMap((block) => block.deletedChains("nat")),
    text: blocks.map(String).join(""),
  };
}

function partial(previous: Plan, next: Plan, changed: string[], alternates?: Set<string>) {
  return renderPartialSync({ previous, next, changed: new Set(changed) }, { alternates });
}

function named(namespace: string, name: string, portName: string, protocol: "TCP" | "UDP") {
  return servicePort({ namespace, name, portName, protocol });
}

Deno.test("serviceChainNames() matches upstream kube-proxy chain names", () => {
  const cases: [ServicePortPlan, string][] = [
    [named("default", "kubernetes", "https", "TCP"), "KUBE-SVC-NPX46M4PTMTKRN6Y"],
    [named("kube-system", "kube-dns", "dns", "UDP"), "KUBE-SVC-TCOU7JCQXEZGVUNU"],
    [named("kube-system", "kube-dns", "dns-tcp", "TCP"), "KUBE-SVC-ERIFXISQEP7F7OF4"],
    [named("kube-system", "kube-dns", "metrics", "TCP"), "KUBE-SVC-JD5MR3NA4I4DYORP"],
  ];
  for (const [service, expected] of cases) {
    assert.equal(serviceChainNames(service).cluster, expected);
    assert.equal(serviceChainNames(service).local, expected.replace("SVC", "SVL"));
  }
});

Deno.test("endpointChainName() is stable and differs per endpoint", () => {
  const service = servicePort({ name: "web" });
  const a = endpointChainName(service, endpoint("10.0.0.1", 80));
  assert.equal(a, endpointChainName(service, endpoint("10.0.0.1", 80)));
  assert.notEqual(a, endpointChainName(service, endpoint("10.0.0.1", 81)));
  assert.match(a, /^KUBE-SEP-[A-Z2-7]{16}$/);
});

Deno.test("probability() formats 1/(n-i) with ten decimals like upstream", () => {
  const cases: [number, number, string][] = [
    [0, 2, "0.5000000000"],
    [0, 3, "0.3333333333"],
    [1, 3, "0.5000000000"],
    [0, 7, "0.1428571429"],
    [0, 1000, "0.0010000000"],
  ];
  for (const [i, n, expected] of cases) assert.equal(probability(i, n), expected);
});

Deno.test("masqueradeMark() turns a bit into upstream's hex mark", () => {
  assert.equal(masqueradeMark(), "0x4000");
  assert.equal(masqueradeMark(14), "0x4000");
  assert.equal(masqueradeMark(0), "0x1");
  assert.equal(masqueradeMark(31), "0x80000000");
  assert.throws(() => masqueradeMark(32), RangeError);
});

Deno.test("renderFull() never captures node ports on loopback unless localhostNodePorts (IPv4 only)", () => {
  const v4 = GOLDEN_CASES.nodeport!;
  assert.doesNotMatch(renderFull(v4).toString(), /127\.0\.0/);
  const withLocalhost = renderFull(v4, { localhostNodePorts: true }).toString();
  assert.match(withLocalhost, /-d 127\.0\.0\.1 -j KUBE-NODEPORTS/);
  assert.match(withLocalhost, /-A KUBE-FIREWALL .*-d 127\.0\.0\.0\/8 ! -s 127\.0\.0\.0\/8/);
  const v6 = renderFull(GOLDEN_CASES.ipv6!, { localhostNodePorts: true }).toString();
  assert.doesNotMatch(v6, /-d (::1|127\.)/);
});

Deno.test("renderFull() jumps to KUBE-NODEPORTS last, once per node-port address", () => {
  const text = renderFull(
    plan([servicePort({ name: "web", nodePort: 30080 })], {
      nodePortAddresses: ["192.168.0.10", "192.168.1.10"],
    }),
  ).toString();
  const services = text.split("\n").filter((line) =>
    line.startsWith("-A KUBE-SERVICES") && !line.includes("REJECT")
  );
  assert.deepEqual(services.slice(-2).map((line) => line.split(" -d ")[1]), [
    "192.168.0.10 -j KUBE-NODEPORTS",
    "192.168.1.10 -j KUBE-NODEPORTS",
  ]);
  const none = renderFull(
    plan([servicePort({ name: "web", nodePort: 30080 })], { nodePortAddresses: [] }),
  );
  assert.doesNotMatch(none.toString(), /-j KUBE-NODEPORTS/);
});

Deno.test("renderFull() writes affinity checks before the statistic rules", () => {
  const lines = renderFull(GOLDEN_CASES.affinity!).toString().split("\n");
  const svc = serviceChainNames(GOLDEN_CASES.affinity!.services[0]!).cluster;
  const rules = lines.filter((line) => line.startsWith(`-A ${svc} `));
  assert.match(
    rules[1]!,
    /-m recent --name KUBE-SEP-\S+ --rcheck --seconds 10800 --reap -j KUBE-SEP-/,
  );
  assert.match(rules[2]!, /-m recent --name KUBE-SEP-\S+ --rcheck/);
  assert.match(rules[3]!, /--probability 0\.5000000000/);
  assert.doesNotMatch(rules[4]!, /statistic/);
  assert.ok(lines.some((line) => /-m recent --name (KUBE-SEP-\S+) --set -m tcp/.test(line)));
});

Deno.test("renderFull() rejects or drops per the plan's whenEmpty", () => {
  const reject = renderFull(GOLDEN_CASES.reject!).toString();
  assert.match(
    reject,
    /-A KUBE-SERVICES .*has no endpoints.*-d 10\.96\.0\.10 --dport 80 -j REJECT/,
  );
  assert.match(reject, /-A KUBE-EXTERNAL-SERVICES .*-d 203\.0\.113\.10 --dport 80 -j REJECT/);
  assert.match(reject, /-A KUBE-EXTERNAL-SERVICES .*--dst-type LOCAL .*--dport 30080 -j REJECT/);
  assert.doesNotMatch(reject, /KUBE-SVC-|KUBE-EXT-/);
  const drop = renderFull(GOLDEN_CASES.itp_local_no_local_endpoints!).toString();
  assert.match(drop, /has no local endpoints.*-d 10\.96\.0\.10 --dport 80 -j DROP/);
});

Deno.test("renderFull() rejects unallocated addresses of the service CIDRs after per-service rules", () => {
  const lines = renderFull(GOLDEN_CASES.reject!).toString().split("\n");
  const filterServices = lines.filter((line) =>
    line.startsWith("-A KUBE-SERVICES") && line.includes("REJECT")
  );
  assert.match(filterServices.at(-1)!, /-d 10\.96\.0\.0\/16 -j REJECT/);
});

Deno.test("renderFull() masquerades cluster-IP traffic per clusterIPMasquerade and detector", () => {
  const cases: [string, RegExp | undefined][] = [
    ["clusterip", /--dport 80 ! -s 10\.244\.0\.0\/16 -j KUBE-MARK-MASQ/],
    ["masquerade_all", /--dport 80 -j KUBE-MARK-MASQ/],
    ["masquerade_bridge", /--dport 80 ! -i cbr0 -j KUBE-MARK-MASQ/],
    ["masquerade_none", undefined],
  ];
  for (const [name, pattern] of cases) {
    const text = renderFull(GOLDEN_CASES[name]!).toString();
    const svcMasq = text.split("\n").filter((l) => /^-A KUBE-SVC-.*KUBE-MARK-MASQ/.test(l));
    if (pattern) assert.match(svcMasq.join("\n"), pattern, name);
    else assert.equal(svcMasq.length, 0, name);
  }
});

Deno.test("renderFull() deletes stale per-service chains found in the kernel", () => {
  const script = renderFull(GOLDEN_CASES.clusterip!, {
    existingChains: ["KUBE-SVC-AAAAAAAAAAAAAAAA", "KUBE-SERVICES", "DOCKER", "KUBE-KUBELET-CANARY"],
  });
  assert.deepEqual(script.deletedChains("nat"), ["KUBE-SVC-AAAAAAAAAAAAAAAA"]);
});

const webRemote = [endpoint("10.244.1.5", 8080), endpoint("10.244.2.7", 8080)];
const before = plan([
  servicePort({ name: "web" }),
  servicePort({ name: "api", clusterIPs: ["10.96.0.20"] }),
]);

Deno.test("serviceChainNames() hashes a service port object once, and equal ports alike", () => {
  const web = named("default", "web", "http", "TCP");
  const first = serviceChainNames(web);
  assert.equal(serviceChainNames(web), first, "the same object from the cache");
  const copy = { ...web, internal: traffic([endpoint("10.244.9.9", 80)]) };
  assert.notEqual(serviceChainNames(copy), first);
  assert.deepEqual(serviceChainNames(copy), first, "names depend on the port's identity only");
  const udp = named("default", "web", "http", "UDP");
  assert.notEqual(serviceChainNames(udp).cluster, first.cluster);
});

Deno.test("renderPartialSync() after an endpoint change writes only that service's chains", () => {
  const moved = [endpoint("10.244.1.5", 8080), endpoint("10.244.3.9", 8080)];
  const after = plan([
    servicePort({ name: "web", internal: traffic(moved), external: traffic(moved) }),
    servicePort({ name: "api", clusterIPs: ["10.96.0.20"] }),
  ]);
  const web = after.services.find((s) => s.name === "web")!;
  const sync = partial(before, after, [web.id]);
  const svc = serviceChainNames(web).cluster;
  const added = endpointChainName(web, moved[1]!);
  const removed = endpointChainName(web, webRemote[1]!);
  const commit = commitOf(sync);
  assert.equal(sync.commit.length, 1, "one nat block");
  assert.deepEqual(commit.nat, [svc, added, removed]);
  assert.deepEqual(commit.deleted, [removed]);
  assert.deepEqual(commit.filter, []);
  assert.doesNotMatch(commit.text, /KUBE-SERVICES|\*filter/);
  assert.deepEqual([sync.staging, sync.cleanup], [[], []]);
});

Deno.test("renderPartialSync() rewrites KUBE-SERVICES when a service is added or removed", () => {
  const added = plan([
    ...before.services,
    servicePort({ name: "new", clusterIPs: ["10.96.0.30"] }),
  ]);
  const id = added.services.find((s) => s.name === "new")!.id;
  const add = commitOf(partial(before, added, [id]));
  assert.ok(add.nat.includes("KUBE-SERVICES"));
  assert.equal(add.deleted.length, 0);

  const remove = commitOf(partial(added, before, [id]));
  assert.ok(remove.nat.includes("KUBE-SERVICES"));
  assert.equal(remove.deleted.length, 3);
});

Deno.test("renderPartialSync() rewrites a filter chain when only a service's filter rules change", () => {
  const remote = [endpoint("10.244.1.5", 8080)];
  const web = (local: PlanEndpoint[]) =>
    plan([servicePort({
      name: "web",
      externalIPs: ["198.51.100.20"],
      internal: traffic(remote),
      external: local.length > 0 ? traffic(local) : traffic([], "drop"),
      externalLocal: true,
    })]);
  const before = web([endpoint("10.244.0.9", 8080, true)]);
  const after = web([]);
  const id = after.services[0]!.id;
  const lostLocal = commitOf(partial(before, after, [id]));
  assert.ok(lostLocal.filter.includes("KUBE-EXTERNAL-SERVICES"), lostLocal.text);
  assert.match(lostLocal.text, /has no local endpoints" .*-j DROP/);
  const regained = commitOf(partial(after, before, [id]));
  assert.ok(regained.filter.includes("KUBE-EXTERNAL-SERVICES"), regained.text);
  assert.doesNotMatch(regained.text, /has no local endpoints/);
});

Deno.test("renderPartialSync() widens the filter table before nat and narrows it after", () => {
  const none = plan([
    servicePort({ name: "web", internal: traffic([]), external: traffic([]) }),
    servicePort({ name: "api", clusterIPs: ["10.96.0.20"] }),
  ]);
  const web = none.services.find((s) => s.name === "web")!;
  for (const [from, to] of [[before, none], [none, before]]) {
    const sync = partial(from!, to!, [web.id]);
    const [widen, nat, narrow] = sync.commit.map(String);
    assert.equal(sync.commit.length, 3);
    assert.match(widen!, /^\*filter\n/);
    assert.doesNotMatch(widen!, /^:KUBE-SERVICES /m, "widening keeps the chain's old rules");
    assert.match(nat!, /^\*nat\n/);
    assert.match(narrow!, /^\*filter\n:KUBE-SERVICES - \[0:0\]\n/);
  }
  const losing = sync(before, none);
  assert.match(losing[0]!, /^-A KUBE-SERVICES .*has no endpoints.* -j REJECT$/m, "reject added");
  const gaining = sync(none, before);
  assert.doesNotMatch(gaining[0]!, /^-A /m, "nothing to add: the old reject stays until nat");
  function sync(from: Plan, to: Plan): string[] {
    return partial(from, to, [web.id]).commit.map(String);
  }
});

Deno.test("renderPartialSync() rewrites a chain under the name it lives under", () => {
  const moved = [endpoint("10.244.1.5", 8080), endpoint("10.244.3.9", 8080)];
  const after = plan([
    servicePort({ name: "web", internal: traffic(moved), external: traffic(moved) }),
    servicePort({ name: "api", clusterIPs: ["10.96.0.20"] }),
  ]);
  const web = after.services.find((s) => s.name === "web")!;
  const svc = serviceChainNames(web).cluster;
  const kept = endpointChainName(web, moved[0]!);
  const removed = endpointChainName(web, webRemote[1]!);
  const sync = partial(before, after, [web.id], new Set([svc, kept, removed]));
  const commit = commitOf(sync);
  assert.ok(commit.nat.includes(alternateChainName(svc)));
  assert.match(commit.text, new RegExp(`-j ${alternateChainName(kept)}$`, "m"));
  assert.deepEqual(commit.deleted, [alternateChainName(removed)]);
  assert.deepEqual(sync.alternates, new Set([svc, kept]));
});

Deno.test("renderFull() drops endpoint rule comments above 1000 endpoints, like kube-proxy", () => {
  const cases: [number, number, boolean][] = [
    [1, 10, false],
    [100, 10, false],
    [101, 10, true],
    [2, LARGE_CLUSTER_ENDPOINTS / 2 + 1, true],
  ];
  for (const [services, endpointsEach, large] of cases) {
    const cluster = uniformCluster(services, endpointsEach);
    assert.equal(isLargeCluster(cluster), large, `${services} × ${endpointsEach}`);
    const lines = renderFull(cluster).toString().split("\n");
    const sepRules = lines.filter((line) => line.startsWith("-A KUBE-SEP-"));
    const toSep = lines.filter((line) => /^-A KUBE-SVC-.* -j KUBE-SEP-/.test(line));
    const commented = [...sepRules, ...toSep].filter((line) => line.includes("--comment"));
    assert.equal(commented.length, large ? 0 : sepRules.length + toSep.length);
    assert.ok(lines.some((line) => line.includes('cluster IP"')), "service rules keep comments");
  }
});

Deno.test("renderPartialSync() renders each side in its own cluster mode", () => {
  const small = uniformCluster(100, 10);
  const large = uniformCluster(101, 10);
  const id = large.services.at(-1)!.id;
  const text = commitOf(partial(small, large, [id])).text;
  const sepRules = text.split("\n").filter((l) => l.startsWith("-A KUBE-SEP-"));
  assert.equal(sepRules.length, 20);
  assert.ok(sepRules.every((line) => !line.includes("--comment")));
});

Deno.test("renderPartialSync() is empty when nothing changed", () => {
  const sync = partial(before, before, ["x"]);
  assert.deepEqual(sync.commit, []);
});

Deno.test("IptablesRestoreScript refuses unsafe arguments and undeclared chains", () => {
  const unsafe = new IptablesRestoreScript("IPv4").declareChain("nat", "KUBE-X")
    .appendRule("nat", "KUBE-X", ["-m", "comment", "--comment", 'a"b']);
  assert.match(unsafe.error!.message, /Cannot use argument/);
  assert.match(unsafe.toString(), /# ERROR: /);
  const undeclared = new IptablesRestoreScript("IPv4").appendRule("nat", "KUBE-Y", [
    "-j",
    "ACCEPT",
  ]);
  assert.match(undeclared.error!.message, /not declared/);
  const long = new IptablesRestoreScript("IPv4").declareChain("nat", "KUBE-" + "X".repeat(30));
  assert.match(long.error!.message, /not a valid iptables chain name/);
});

Deno.test("renderCleanup() deletes jumps from built-in chains, then kproxy chains only", () => {
  const save = [
    "*nat",
    ":PREROUTING ACCEPT [0:0]",
    ":KUBE-SERVICES - [0:0]",
    ":KUBE-SVC-NPX46M4PTMTKRN6Y - [0:0]",
    ":KUBE-KUBELET-CANARY - [0:0]",
    ":DOCKER - [0:0]",
    '-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
    "-A PREROUTING -j DOCKER",
    "-A KUBE-SERVICES -d 10.96.0.1/32 -p tcp -j KUBE-SVC-NPX46M4PTMTKRN6Y",
    "COMMIT",
  ].join("\n");
  assert.deepEqual(parseSavedChains(save).length, 5);
  const text = renderCleanup({ table: "nat", save }, "IPv4").toString();
  assert.equal(
    text,
    [
      "*nat",
      ":KUBE-SERVICES - [0:0]",
      ":KUBE-SVC-NPX46M4PTMTKRN6Y - [0:0]",
      '-D PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
      "-X KUBE-SERVICES",
      "-X KUBE-SVC-NPX46M4PTMTKRN6Y",
      "COMMIT",
      "",
    ].join("\n"),
  );
  assert.equal(
    renderCleanup({ table: "nat", save: "*nat\n:DOCKER - [0:0]\nCOMMIT\n" }, "IPv4").isEmpty,
    true,
  );
});

Deno.test("chooseVariant() prefers hinted, then busier, then nft", () => {
  const s = (available: boolean, rules: number, hinted = false) => ({ available, rules, hinted });
  const cases: [ReturnType<typeof s>, ReturnType<typeof s>, string][] = [
    [s(true, 0), s(true, 0), "nft"],
    [s(true, 3), s(true, 10), "legacy"],
    [s(true, 10), s(true, 3), "nft"],
    [s(true, 0, true), s(true, 50), "nft"],
    [s(true, 50), s(true, 0, true), "legacy"],
    [s(false, 0), s(true, 0), "legacy"],
    [s(true, 0), s(false, 0), "nft"],
  ];
  for (const [nft, legacy, expected] of cases) assert.equal(chooseVariant(nft, legacy), expected);
  assert.deepEqual(summarizeSave("*nat\n:KUBE-KUBELET-CANARY - [0:0]\n-A X -j Y\nCOMMIT\n"), {
    rules: 1,
    hinted: true,
  });
});

Deno.test("renderFullSync() stages new chains in bounded inputs, switches in one commit, cleans up after", () => {
  const services = Array.from(
    { length: 6 },
    (_, i) => servicePort({ name: `svc-${i}`, clusterIPs: [`10.96.1.${i}`], nodePort: 30000 + i }),
  );
  const big = plan(services);
  const stale = "KUBE-SEP-AAAAAAAAAAAAAAAA";
  const sync = renderFullSync(big, {
    maxChainsPerChunk: 5,
    kernel: { nat: [stale], natTargets: new Set(), filter: [] },
  });
  const whole = renderFull(big);
  assert.ok(sync.staging.length > 2);
  assert.deepEqual(sync.staging[0]!.chainNames("nat")[0], "KUBE-MARK-MASQ");
  for (const script of sync.staging) {
    assert.ok(script.chainNames("nat").length <= 5);
    assert.deepEqual(script.chainNames("filter"), []);
    assert.doesNotMatch(String(script), /KUBE-SERVICES/, "staging touches no live chain");
  }
  const [widen, nat, narrow] = sync.commit;
  assert.equal(sync.commit.length, 3);
  assert.deepEqual(nat!.chainNames("filter"), []);
  assert.ok(nat!.chainNames("nat").includes("KUBE-SERVICES"));
  assert.ok(nat!.chainNames("nat").every((chain) => !/^KUBE-(SVC|SEP|EXT)-/.test(chain)));
  assert.deepEqual(widen!.chainNames("nat"), []);
  assert.ok(narrow!.chainNames("filter").includes("KUBE-SERVICES"));
  assert.deepEqual(sync.cleanup.map((script) => script.deletedChains("nat")), [[stale]]);
  const written = [...sync.staging, nat!, narrow!];
  const declared = written.flatMap((script) => script.chainNames("nat")).sort();
  // KUBE-MARK-MASQ is created before the chains that jump to it and written again in the commit.
  assert.deepEqual(declared, [...whole.chainNames("nat"), "KUBE-MARK-MASQ"].sort());
  assert.equal(written.reduce((sum, script) => sum + script.ruleCount, 0), whole.ruleCount + 1);
  for (const service of services) {
    const holder = sync.staging.filter((script) =>
      script.chainNames("nat").some((chain) =>
        chain.endsWith(serviceChainNames(service).cluster.slice(9))
      )
    );
    assert.equal(holder.length, 1, `${service.name} split across scripts`);
  }
});

Deno.test("renderFullSync() writes chains that are in use under their alternate name", () => {
  const web = before.services.find((s) => s.name === "web")!;
  const svc = serviceChainNames(web).cluster;
  const sep = endpointChainName(web, webRemote[0]!);
  const kernel = { nat: [svc, sep, "KUBE-MARK-MASQ"], natTargets: new Set([svc, sep]), filter: [] };
  const sync = renderFullSync(before, { maxChainsPerChunk: 3, kernel });
  const staged = sync.staging.flatMap((script) => script.chainNames("nat"));
  assert.ok(staged.includes(alternateChainName(svc)) && !staged.includes(svc));
  assert.ok(!staged.includes("KUBE-MARK-MASQ"), "an existing KUBE-MARK-MASQ waits for the commit");
  assert.match(String(sync.commit[1]), new RegExp(`^-A KUBE-SERVICES .* -j ${svc}-2$`, "m"));
  assert.deepEqual(sync.alternates, new Set([svc, sep]));
  assert.deepEqual(sync.cleanup.flatMap((script) => script.deletedChains("nat")), [svc, sep]);
  const unchunked = renderFullSync(before, { maxChainsPerChunk: Infinity, kernel });
  assert.deepEqual([unchunked.staging, unchunked.cleanup, unchunked.alternates], [
    [],
    [],
    new Set(),
  ]);
  assert.ok(unchunked.commit[1]!.chainNames("nat").includes(svc), "one nat commit, upstream names");
});

Deno.test("renderPartialSync() over maxChainsPerChunk stages under free names, switches in one commit, deletes the old chains after", () => {
  const eps = (
    base: number,
  ) => [endpoint(`10.244.${base}.1`, 8080), endpoint(`10.244.${base}.2`, 8080)];
  const ports = (shift: number) =>
    Array.from({ length: 6 }, (_, i) =>
      servicePort({
        name: `svc-${i}`,
        clusterIPs: [`10.96.1.${i}`],
        internal: traffic(eps(i + shift)),
        external: traffic(eps(i + shift)),
      }));
  const old = plan(ports(0));
  const next = plan(ports(10).slice(1));
  const changed = new Set(old.services.map((s) => s.id));
  const first = old.services[1]!;
  const live = new Set([serviceChainNames(first).cluster]);
  const kernel = new Set(
    old.services.flatMap((service) => [
      serviceChainNames(service).cluster,
      ...service.internal.endpoints.map((ep) => endpointChainName(service, ep)),
    ]).map((chain) => live.has(chain) ? alternateChainName(chain) : chain),
  );
  const sync = renderPartialSync({ previous: old, next, changed }, {
    alternates: live,
    maxChainsPerChunk: 5,
  });
  assert.ok(sync.staging.length >= 5, `${sync.staging.length} staging inputs`);
  const staged = sync.staging.flatMap((script) => script.chainNames("nat"));
  for (const script of sync.staging) assert.ok(script.chainNames("nat").length <= 5);
  assert.deepEqual(staged.filter((chain) => kernel.has(chain)), [], "staging writes no live chain");
  assert.equal(staged.length, 5 * 3);
  assert.ok(staged.includes(serviceChainNames(first).cluster), "a chain under -2 moves back");
  const commit = commitOf(sync);
  assert.ok(commit.nat.includes("KUBE-SERVICES"));
  assert.deepEqual(commit.nat.filter((chain) => /^KUBE-(SVC|SEP)-/.test(chain)), []);
  assert.deepEqual(commit.deleted, []);
  assert.doesNotMatch(commit.text, /svc-0/, "the removed service leaves KUBE-SERVICES");
  const deleted = sync.cleanup.flatMap((script) => script.deletedChains("nat"));
  for (const script of sync.cleanup) assert.ok(script.deletedChains("nat").length <= 5);
  assert.deepEqual(new Set(deleted), kernel);
  assert.ok(deleted.indexOf(alternateChainName(serviceChainNames(first).cluster)) < 5);
  const alternates = [...sync.alternates].sort();
  assert.deepEqual(
    alternates,
    staged.filter((chain) => chain.endsWith("-2")).map((chain) => chain.slice(0, -2)).sort(),
  );
  assert.ok(!sync.alternates.has(serviceChainNames(first).cluster));

  const small = renderPartialSync({ previous: old, next, changed }, { maxChainsPerChunk: 100 });
  assert.deepEqual([small.staging, small.cleanup], [[], []], "below the limit: one input");
});

Deno.test("renderPartialSync() chunked keeps the chains whose rules and callees are the same", () => {
  const ports = (moved: string) =>
    Array.from({ length: 4 }, (_, i) => {
      const eps = [endpoint(`10.244.${i}.1`, 8080), endpoint(`10.244.${i}.${moved}`, 8080)];
      return servicePort({
        name: `svc-${i}`,
        clusterIPs: [`10.96.1.${i}`],
        internal: traffic(eps),
        external: traffic(eps),
      });
    });
  const [old, next] = [plan(ports("2")), plan(ports("3"))];
  const changed = new Set(old.services.map((s) => s.id));
  const sync = renderPartialSync({ previous: old, next, changed }, { maxChainsPerChunk: 3 });
  const staged = sync.staging.flatMap((script) => script.chainNames("nat"));
  const deleted = sync.cleanup.flatMap((script) => script.deletedChains("nat"));
  for (const [i, service] of next.services.entries()) {
    const svc = serviceChainNames(service).cluster;
    const kept = endpointChainName(service, service.internal.endpoints[0]!);
    const added = endpointChainName(service, service.internal.endpoints[1]!);
    const gone = endpointChainName(old.services[i]!, old.services[i]!.internal.endpoints[1]!);
    assert.ok(staged.includes(alternateChainName(svc)) && staged.includes(added));
    assert.ok(!staged.some((chain) => chain.startsWith(kept)), "an unchanged endpoint chain");
    assert.ok(deleted.includes(svc) && deleted.includes(gone) && !deleted.includes(kept));
    assert.ok(sync.alternates.has(svc) && !sync.alternates.has(added));
  }
});
