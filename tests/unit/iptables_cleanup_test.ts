import assert from "node:assert/strict";
import { isIptablesModeChain } from "../../backends/iptables/chains.ts";
import { removeChains } from "../../backends/iptables/cleanup.ts";
import { splitSave } from "../../backends/iptables/save.ts";
import { createIptablesBackend } from "../../backends/iptables/applier.ts";
import { IPVS_MODE_CHAINS, isIpvsModeChain } from "../../backends/ipvs/iptables.ts";
import { defaultConfig } from "../../lib/config/defaults.ts";
import { FakeExecutor, type FakeReply, type RecordedCommand } from "../support/fake_executor.ts";
import { emptyPlan } from "../../lib/core/plan.ts";

/** A node's `iptables-save` after kube-proxy 1.36 in iptables mode, with kubelet's and another tool's rules. */
const KUBE_PROXY_SAVE = [
  "*mangle",
  ":PREROUTING ACCEPT [0:0]",
  ":KUBE-IPTABLES-HINT - [0:0]",
  ":KUBE-KUBELET-CANARY - [0:0]",
  ":KUBE-PROXY-CANARY - [0:0]",
  "COMMIT",
  "*filter",
  ":INPUT ACCEPT [0:0]",
  ":FORWARD ACCEPT [0:0]",
  ":OUTPUT ACCEPT [0:0]",
  ":KUBE-EXTERNAL-SERVICES - [0:0]",
  ":KUBE-FIREWALL - [0:0]",
  ":KUBE-FORWARD - [0:0]",
  ":KUBE-KUBELET-CANARY - [0:0]",
  ":KUBE-NODEPORTS - [0:0]",
  ":KUBE-PROXY-CANARY - [0:0]",
  ":KUBE-PROXY-FIREWALL - [0:0]",
  ":KUBE-SERVICES - [0:0]",
  '-A INPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL',
  '-A INPUT -m comment --comment "kubernetes health check service ports" -j KUBE-NODEPORTS',
  '-A INPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes externally-visible service portals" -j KUBE-EXTERNAL-SERVICES',
  "-A INPUT -j KUBE-FIREWALL",
  '-A INPUT -s 198.51.100.7/32 -m comment --comment "someone else" -j DROP',
  '-A FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD',
  '-A FORWARD -m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
  "-A OUTPUT -j KUBE-FIREWALL",
  '-A KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 -m comment --comment "block incoming localnet connections" -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP',
  "-A KUBE-FORWARD -m conntrack --ctstate INVALID -m nfacct --nfacct-name  ct_state_invalid_dropped_pkts -j DROP",
  '-A KUBE-PROXY-FIREWALL -d 192.0.2.50/32 -p tcp -m comment --comment "ns5/svc5:p80 traffic not accepted by KUBE-FW-NUKIZ6OKUXPJNT4C" -m tcp --dport 80 -j DROP',
  "COMMIT",
  "*nat",
  ":PREROUTING ACCEPT [0:0]",
  ":OUTPUT ACCEPT [0:0]",
  ":POSTROUTING ACCEPT [0:0]",
  ":DOCKER - [0:0]",
  ":KUBE-KUBELET-CANARY - [0:0]",
  ":KUBE-MARK-MASQ - [0:0]",
  ":KUBE-NODEPORTS - [0:0]",
  ":KUBE-POSTROUTING - [0:0]",
  ":KUBE-PROXY-CANARY - [0:0]",
  ":KUBE-SEP-SXIVWICOYRO3J4NJ - [0:0]",
  ":KUBE-SERVICES - [0:0]",
  ":KUBE-SVC-XPGD46QRK7WJZT7O - [0:0]",
  '-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
  "-A PREROUTING -m addrtype --dst-type LOCAL -j DOCKER",
  '-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
  '-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING',
  '-A KUBE-SERVICES -d 10.96.0.41/32 -p tcp -m comment --comment "ns1/svc1:p80 cluster IP" -m tcp --dport 80 -j KUBE-SVC-XPGD46QRK7WJZT7O',
  '-A KUBE-SVC-XPGD46QRK7WJZT7O -m comment --comment "ns1/svc1:p80 -> 10.244.1.10:8080" -j KUBE-SEP-SXIVWICOYRO3J4NJ',
  "COMMIT",
  "",
].join("\n");

Deno.test("splitSave() returns the text of each table iptables-save lists", () => {
  const tables = splitSave(KUBE_PROXY_SAVE);
  assert.deepEqual([...tables.keys()], ["mangle", "filter", "nat"]);
  assert.match(tables.get("nat")!, /^\*nat\n:PREROUTING ACCEPT \[0:0\]\n[^]*\nCOMMIT$/);
  assert.deepEqual(splitSave(""), new Map());
});

/** An executor whose IPv4 nft variant holds `save`; the other variants hold no table. */
function nodeWith(save: string): FakeExecutor {
  return new FakeExecutor((command) => {
    if (command.program === "iptables-nft-save") return { code: 0, stdout: save, stderr: "" };
    if (command.program === "ip6tables-legacy-save") throw new Error("program not found in PATH");
    return { code: 0, stdout: "", stderr: "" };
  });
}

function restored(calls: RecordedCommand[]): RecordedCommand[] {
  return calls.filter((call) => call.program.endsWith("-restore"));
}

Deno.test("removeChains() lists each variant's tables without -t and touches only those", async () => {
  const executor = nodeWith(KUBE_PROXY_SAVE);
  await removeChains(executor, { owns: isIptablesModeChain, owner: "iptables mode" });
  const saves = executor.calls.filter((call) => call.program.endsWith("-save"));
  assert.deepEqual(saves.map((call) => [call.program, ...call.args].join(" ")), [
    "iptables-nft-save",
    "ip6tables-nft-save",
    "iptables-legacy-save",
    "ip6tables-legacy-save",
  ]);
  const restores = restored(executor.calls);
  assert.deepEqual(restores.map((call) => call.program), ["iptables-nft-restore"]);
  assert.deepEqual(restores[0]!.args, ["-w", "5", "--noflush"]);
});

Deno.test("removeChains() removes kube-proxy's iptables chains and jumps, keeps kubelet's and others'", async () => {
  const executor = nodeWith(KUBE_PROXY_SAVE);
  const removed = await removeChains(executor, {
    owns: isIptablesModeChain,
    owner: "iptables mode",
  });
  assert.deepEqual(removed.map(({ table, chains }) => [table, chains]), [
    ["mangle", ["KUBE-PROXY-CANARY"]],
    ["filter", [
      "KUBE-EXTERNAL-SERVICES",
      "KUBE-FORWARD",
      "KUBE-NODEPORTS",
      "KUBE-PROXY-CANARY",
      "KUBE-PROXY-FIREWALL",
      "KUBE-SERVICES",
    ]],
    ["nat", [
      "KUBE-MARK-MASQ",
      "KUBE-NODEPORTS",
      "KUBE-POSTROUTING",
      "KUBE-PROXY-CANARY",
      "KUBE-SEP-SXIVWICOYRO3J4NJ",
      "KUBE-SERVICES",
      "KUBE-SVC-XPGD46QRK7WJZT7O",
    ]],
  ]);
  const script = restored(executor.calls).map((call) => call.stdin).join("");
  for (const kept of ["KUBE-FIREWALL", "KUBE-KUBELET-CANARY", "KUBE-IPTABLES-HINT", "DOCKER"]) {
    assert.doesNotMatch(script, new RegExp(`-X ${kept}\\b|-D \\S+ .*-j ${kept}$`, "m"), kept);
  }
  assert.match(
    script,
    /^-D INPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL$/m,
  );
  assert.match(
    script,
    /^-D POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING$/m,
  );
  assert.doesNotMatch(script, /someone else/);
});

Deno.test("removeChains() keeps the chains the running mode uses, and the jumps to them", async () => {
  const executor = nodeWith(KUBE_PROXY_SAVE);
  const removed = await removeChains(executor, {
    owns: isIptablesModeChain,
    keep: isIpvsModeChain,
    owner: "iptables mode",
  });
  const nat = removed.find((entry) => entry.table === "nat")!.chains;
  assert.ok(!nat.includes("KUBE-SERVICES") && !nat.includes("KUBE-POSTROUTING"));
  assert.ok(nat.includes("KUBE-SVC-XPGD46QRK7WJZT7O") && nat.includes("KUBE-NODEPORTS"));
  const filter = removed.find((entry) => entry.table === "filter")!.chains;
  assert.ok(filter.includes("KUBE-SERVICES"), "the ipvs mode has no filter KUBE-SERVICES");
  assert.ok(!filter.includes("KUBE-FORWARD") && !filter.includes("KUBE-PROXY-FIREWALL"));
  const script = restored(executor.calls).map((call) => call.stdin).join("");
  assert.doesNotMatch(script, /-D PREROUTING .*-j KUBE-SERVICES/);
  // The rule of the kept KUBE-SERVICES that jumps to a removed chain goes.
  assert.match(script, /^-D KUBE-SERVICES .*-j KUBE-SVC-XPGD46QRK7WJZT7O$/m);
});

Deno.test("removeChains() reports a restore that failed and still cleans the others", async () => {
  const executor = new FakeExecutor((command) => {
    if (command.program.endsWith("-save")) return { code: 0, stdout: KUBE_PROXY_SAVE, stderr: "" };
    if (command.program.endsWith("-legacy-restore")) {
      return { code: 4, stdout: "", stderr: "iptables-restore: line 3 failed" };
    }
    return { code: 0, stdout: "", stderr: "" };
  });
  await assert.rejects(
    removeChains(executor, { owns: isIptablesModeChain, owner: "iptables mode" }),
    /Cannot remove the iptables mode chains: 2 restores failed/,
  );
  assert.equal(
    restored(executor.calls).filter((call) => call.program === "ip6tables-legacy-restore").length,
    1,
  );
});

Deno.test("createIptablesBackend() cleanup() removes the mode's chains of every variant and family present", async () => {
  const executor = nodeWith(KUBE_PROXY_SAVE);
  const backend = createIptablesBackend({
    executor,
    config: { ...defaultConfig("node-a"), proxyMode: "iptables" },
  });
  await backend.cleanup({ keepChains: (table) => table === "mangle" });
  const scripts = restored(executor.calls);
  assert.equal(scripts.length, 1);
  assert.doesNotMatch(scripts[0]!.stdin ?? "", /^\*mangle$/m);
  assert.match(scripts[0]!.stdin ?? "", /^-X KUBE-SVC-XPGD46QRK7WJZT7O$/m);
});

Deno.test("createIptablesBackend() removes the mode's chains from the other variant after its first full sync", async () => {
  const executor = new FakeExecutor((command) =>
    command.program === "iptables-legacy-save"
      ? { code: 0, stdout: KUBE_PROXY_SAVE, stderr: "" }
      : { code: 0, stdout: "", stderr: "" }
  );
  const backend = createIptablesBackend({
    executor,
    config: {
      ...defaultConfig("node-a"),
      proxyMode: "iptables",
      iptables: { ...defaultConfig("node-a").iptables, backend: "nft" },
    },
    families: ["IPv4"],
  });
  const plan = emptyPlan("IPv4");
  const sync = () => backend.sync({ plans: [plan], changed: new Set(), full: true });
  await sync();
  const legacy = restored(executor.calls).filter((c) => c.program === "iptables-legacy-restore");
  assert.equal(legacy.length, 1);
  assert.ok(
    executor.calls.findIndex((c) => c.program === "iptables-nft-restore") <
      executor.calls.indexOf(legacy[0]!),
    "its own rules first",
  );
  assert.match(legacy[0]!.stdin ?? "", /^-X KUBE-SVC-XPGD46QRK7WJZT7O$/m);
  await sync();
  assert.equal(
    restored(executor.calls).filter((c) => c.program === "iptables-legacy-restore").length,
    1,
    "once",
  );
});

/** iptables-nft 1.8.9's answers to `-S CHAIN` for a chain or table that does not exist. */
const NO_SUCH_CHAIN = {
  code: 1,
  stdout: "",
  stderr:
    "iptables v1.8.9 (nf_tables): chain `KUBE-LOAD-BALANCER' in table `nat' is incompatible, use 'nft' tool.\n",
};

/** An executor whose nft variant answers each `-S CHAIN` probe with `probe`, and whose tables are `save`. */
function probedNode(save: string, probe: (table: string, chain: string) => FakeReply) {
  return new FakeExecutor((command) => {
    if (/^ip6?tables-nft$/.test(command.program)) {
      const table = command.args[command.args.indexOf("-t") + 1]!;
      const chain = command.args[command.args.indexOf("-S") + 1]!;
      const reply = probe(table, chain);
      if (reply instanceof Error) throw reply;
      return { code: 0, stdout: "", stderr: "", ...reply };
    }
    if (command.program === "iptables-nft-save") return { code: 0, stdout: save, stderr: "" };
    return { code: 0, stdout: "", stderr: "" };
  });
}

const IPVS_REMOVAL = {
  owns: isIpvsModeChain,
  names: IPVS_MODE_CHAINS,
  keep: isIptablesModeChain,
  owner: "ipvs mode",
};

Deno.test("removeChains() with the chains' names reads no nft table when none of them exists", async () => {
  const executor = probedNode(KUBE_PROXY_SAVE, () => NO_SUCH_CHAIN);
  assert.deepEqual(await removeChains(executor, IPVS_REMOVAL), []);
  const programs = executor.calls.map((call) => call.program);
  assert.ok(!programs.includes("iptables-nft-save") && !programs.includes("ip6tables-nft-save"));
  assert.ok(programs.includes("iptables-legacy-save"), "legacy tables are listed as before");
  const expected = Object.entries(IPVS_MODE_CHAINS).flatMap(([table, chains]) =>
    chains.filter((chain) => !isIptablesModeChain(table, chain))
      .map((chain) => `-w 5 -t ${table} -S ${chain}`)
  ).sort();
  assert.ok(expected.length > 0);
  for (const program of ["iptables-nft", "ip6tables-nft"]) {
    const probes = executor.calls.filter((call) => call.program === program);
    assert.deepEqual(probes.map((call) => call.args.join(" ")).sort(), expected, program);
  }
});

Deno.test("removeChains() reads and cleans the nft table when one of the named chains exists", async () => {
  const save = KUBE_PROXY_SAVE.replace(
    ":KUBE-MARK-MASQ - [0:0]",
    ":KUBE-LOAD-BALANCER - [0:0]\n:KUBE-MARK-MASQ - [0:0]",
  );
  const executor = probedNode(
    save,
    (table, chain) => table === "nat" && chain === "KUBE-LOAD-BALANCER" ? {} : NO_SUCH_CHAIN,
  );
  const removed = await removeChains(executor, IPVS_REMOVAL);
  assert.deepEqual(removed.map(({ table, chains }) => [table, chains]), [
    ["nat", ["KUBE-LOAD-BALANCER"]],
  ]);
});

Deno.test("removeChains() reads the nft tables when a probe fails for another reason", async () => {
  const save = KUBE_PROXY_SAVE.replace(
    ":KUBE-MARK-MASQ - [0:0]",
    ":KUBE-LOAD-BALANCER - [0:0]\n:KUBE-MARK-MASQ - [0:0]",
  );
  for (
    const failure of [
      { code: 4, stderr: "Another app is currently holding the xtables lock.\n" },
      new Error("killed after 60000 ms timeout"),
    ]
  ) {
    const executor = probedNode(
      save,
      (table, chain) => table === "nat" && chain === "KUBE-LOAD-BALANCER" ? failure : NO_SUCH_CHAIN,
    );
    const removed = await removeChains(executor, IPVS_REMOVAL);
    assert.deepEqual(removed.map(({ table, chains }) => [table, chains]), [
      ["nat", ["KUBE-LOAD-BALANCER"]],
    ]);
  }
});
