import assert from "node:assert/strict";
import { createIptablesBackend } from "../../backends/iptables/applier.ts";
import { endpointChainName, serviceChainNames } from "../../backends/iptables/names.ts";
import { defaultConfig } from "../../lib/config/defaults.ts";
import type { Config } from "../../lib/config/types.ts";
import { FakeExecutor, type RecordedCommand } from "../support/fake_executor.ts";
import { emptyPlan } from "../../lib/core/plan.ts";
import { GOLDEN_CASES, PARTIAL_CASES, uniformCluster } from "../golden/iptables/fixtures.ts";
import { NetnsExecutor } from "../../scripts/netns.ts";
import { NetnsChecker, netnsSkipReason } from "../support/netns_check.ts";

function config(iptables: Partial<Config["iptables"]> = {}): Config {
  const base = defaultConfig("node-a");
  return { ...base, proxyMode: "iptables", iptables: { ...base.iptables, ...iptables } };
}

/** An IPv4 iptables backend forced to the nft binaries. */
function nftBackend(executor: FakeExecutor, options: { nftChainsPerRestore?: number } = {}) {
  return createIptablesBackend({
    executor,
    config: config({ backend: "nft" }),
    families: ["IPv4"],
    ...options,
  });
}

function restores(calls: RecordedCommand[]): RecordedCommand[] {
  return calls.filter((call) => call.program.endsWith("-restore"));
}

const change = PARTIAL_CASES.partial_endpoint_change!;

Deno.test("createIptablesBackend() first sync detects the variant, restores fully and installs jumps", async () => {
  const executor = new FakeExecutor((command) => {
    if (command.program === "iptables-legacy-save") {
      return { code: 0, stdout: "*nat\n-A X -j Y\n", stderr: "" };
    }
    if (command.args.includes("-C")) return { code: 1, stdout: "", stderr: "Bad rule" };
    return { code: 0, stdout: "", stderr: "" };
  });
  const backend = createIptablesBackend({ executor, config: config(), families: ["IPv4"] });
  assert.equal(backend.mode, "iptables");
  const result = await backend.sync({
    plans: [change.previous],
    changed: new Set(),
    full: false,
  });
  assert.equal(result.full, true);
  const [restore] = restores(executor.calls);
  assert.equal(restore?.program, "iptables-legacy-restore");
  assert.deepEqual(restore?.args, ["-w", "5", "--noflush", "--counters"]);
  const tables = (restore?.stdin ?? "").split("\n").filter((line) => line.startsWith("*"));
  assert.deepEqual(tables, ["*filter", "*nat", "*mangle", "*filter"], "widen, switch, narrow");
  const inserts = (restore?.stdin ?? "").split("\n").filter((line) => line.startsWith("-I "));
  assert.equal(inserts.length, 12);
  assert.ok(
    inserts.includes(
      '-I PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
    ),
  );
  assert.equal(executor.calls.filter((call) => call.args.includes("-C")).length, 0);
});

Deno.test("createIptablesBackend() syncs fully when the cluster enters large cluster mode", async () => {
  const executor = new FakeExecutor();
  const backend = nftBackend(executor);
  const small = uniformCluster(100, 10);
  const large = uniformCluster(101, 10);
  await backend.sync({ plans: [small], changed: new Set(), full: true });
  const result = await backend.sync({
    plans: [large],
    changed: new Set([large.services.at(-1)!.id]),
    full: false,
  });
  assert.equal(result.full, true);
  assert.doesNotMatch(restores(executor.calls).at(-1)?.stdin ?? "", /-A KUBE-SEP-\S+ -m comment/);
});

Deno.test("createIptablesBackend() chunks a partial sync too large for one iptables-nft input, without a full sync", async () => {
  const executor = new FakeExecutor();
  const backend = nftBackend(executor, { nftChainsPerRestore: 20 });
  const before = uniformCluster(30, 3);
  const after = uniformCluster(30, 4);
  await backend.sync({ plans: [before], changed: new Set(), full: true });
  executor.calls.length = 0;
  const everything = new Set(after.services.map((s) => s.id));
  const result = await backend.sync({
    plans: [after],
    changed: everything,
    full: false,
  });
  assert.equal(result.full, false);
  assert.match(result.summary ?? "", /\(partial\)/);
  assert.ok(!executor.calls.some((call) => call.program.endsWith("-save")), "no full sync");
  const inputs = restores(executor.calls).map((call) => call.stdin ?? "");
  assert.ok(inputs.length > 2, `the partial sync is chunked: ${inputs.length} inputs`);
  for (const input of inputs) {
    const declared = input.split("\n").filter((line) => /^:KUBE-(SVC|SEP|EXT|FW|SVL)-/.test(line))
      .length;
    assert.ok(declared <= 20, `one input declares ${declared} per-service chains`);
  }

  // Back again, in chunks too: the chains written under their alternate names move back.
  executor.calls.length = 0;
  const back = await backend.sync({
    plans: [before],
    changed: everything,
    full: false,
  });
  assert.equal(back.full, false);
  assert.ok(restores(executor.calls).length > 2);

  executor.calls.length = 0;
  const one = new Set([after.services[0]!.id]);
  const small = await backend.sync({
    plans: [after],
    changed: one,
    full: false,
  });
  assert.equal(small.full, false);
  assert.equal(restores(executor.calls).length, 1, "a small change is one input");
});

Deno.test("createIptablesBackend() partial sync after one endpoint change writes only that service's chains", async () => {
  const executor = new FakeExecutor();
  const backend = nftBackend(executor);
  await backend.sync({ plans: [change.previous], changed: new Set(), full: true });
  executor.calls.length = 0;
  const result = await backend.sync({
    plans: [change.next],
    changed: change.changed,
    full: false,
  });
  assert.equal(result.full, false);
  assert.equal(executor.calls.length, 1);
  const input = executor.calls[0]!.stdin ?? "";
  assert.equal(executor.calls[0]!.program, "iptables-nft-restore");
  const web = change.next.services.find((s) => s.name === "web")!;
  const declared = [...input.matchAll(/^:(\S+) /gm)].map((m) => m[1]);
  assert.deepEqual(declared, [
    serviceChainNames(web).cluster,
    endpointChainName(web, web.internal.endpoints[1]!),
    endpointChainName(
      web,
      change.previous.services.find((s) => s.name === "web")!.internal.endpoints[1]!,
    ),
  ]);
  assert.doesNotMatch(input, /KUBE-SERVICES|KUBE-NODEPORTS|KUBE-SVC-KKDGWRPDK6Z5NCHS|\*filter/);
});

Deno.test("createIptablesBackend() reports the rules it wrote and owns per table, after full and partial syncs", async () => {
  const appended = (table: string, input: string) => {
    const blocks = input.split(/^\*/m).filter((block) => block.startsWith(`${table}\n`));
    return blocks.join("").split("\n").filter((line) => line.startsWith("-A ")).length;
  };
  const executor = new FakeExecutor();
  const backend = nftBackend(executor);
  const full = await backend.sync({
    plans: [change.previous],
    changed: new Set(),
    full: true,
  });
  const fullInput = restores(executor.calls).map((call) => call.stdin ?? "").join("");
  const nat = appended("nat", fullInput);
  assert.deepEqual(
    full.iptablesRules?.map(({ family, table, written }) => [family, table, written]),
    [
      ["IPv4", "filter", appended("filter", fullInput)],
      ["IPv4", "nat", nat],
    ],
  );
  // The filter chains are written twice (widened, then narrowed): the total counts them once.
  for (const count of full.iptablesRules!) {
    assert.ok(count.total! > 0 && count.total! <= count.written);
  }

  executor.calls.length = 0;
  const partial = await backend.sync({
    plans: [change.next],
    changed: change.changed,
    full: false,
  });
  assert.equal(partial.full, false);
  const fresh = await nftBackend(new FakeExecutor()).sync({
    plans: [change.next],
    changed: new Set(),
    full: true,
  });
  const partialInput = executor.calls[0]?.stdin ?? "";
  assert.deepEqual(
    partial.iptablesRules,
    fresh.iptablesRules!.map((count) => ({
      ...count,
      written: appended(count.table, partialInput),
    })),
    "after a partial sync, the same totals as a full sync of the same plan",
  );
  assert.ok(partial.iptablesRules!.find((c) => c.table === "nat")!.written < nat);
});

Deno.test("createIptablesBackend() skips the restore when a partial sync changes nothing", async () => {
  const executor = new FakeExecutor();
  const backend = nftBackend(executor);
  await backend.sync({ plans: [change.previous], changed: new Set(), full: true });
  executor.calls.length = 0;
  await backend.sync({
    plans: [change.previous],
    changed: new Set(["x"]),
    full: false,
  });
  assert.equal(executor.calls.length, 0);
});

Deno.test("createIptablesBackend() falls back to a full sync after a failed restore", async () => {
  const executor = new FakeExecutor();
  const backend = nftBackend(executor);
  await backend.sync({ plans: [change.previous], changed: new Set(), full: true });
  executor.reply({ code: 2, stderr: "iptables-restore: line 3 failed" });
  await assert.rejects(
    backend.sync({ plans: [change.next], changed: change.changed, full: false }),
    /exit status 2: iptables-restore: line 3 failed/,
  );
  executor.calls.length = 0;
  const result = await backend.sync({
    plans: [change.next],
    changed: change.changed,
    full: false,
  });
  assert.equal(result.full, true);
  assert.match(restores(executor.calls).at(-1)?.stdin ?? "", /^:KUBE-SERVICES /m);
});

Deno.test("createIptablesBackend() inserts only missing jumps, and checks with -C when a save fails", async () => {
  const natSave = [
    "*nat",
    ":KUBE-SERVICES - [0:0]",
    '-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
    '-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
    '-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING',
    "COMMIT",
  ].join("\n");
  const executor = new FakeExecutor((command) => {
    if (command.program.endsWith("-save")) {
      return command.args[1] === "nat"
        ? { code: 0, stdout: natSave, stderr: "" }
        : { code: 4, stdout: "", stderr: "locked" };
    }
    return { code: command.args.includes("-C") ? 1 : 0, stdout: "", stderr: "" };
  });
  const backend = nftBackend(executor);
  await backend.sync({
    plans: [GOLDEN_CASES.clusterip!],
    changed: new Set(),
    full: true,
  });
  assert.doesNotMatch(restores(executor.calls).at(-1)?.stdin ?? "", /^-I /m);
  const checks = executor.calls.filter((call) => call.args.includes("-C"));
  assert.equal(checks.length, 9);
  assert.ok(checks.every((call) => call.args.includes("filter")));
});

Deno.test("createIptablesBackend() deletes stale service chains found by iptables-save on a full sync", async () => {
  const executor = new FakeExecutor((command) =>
    command.program === "iptables-nft-save"
      ? { code: 0, stdout: "*nat\n:KUBE-SVC-AAAAAAAAAAAAAAAA - [0:0]\nCOMMIT\n", stderr: "" }
      : { code: 0, stdout: "", stderr: "" }
  );
  const backend = nftBackend(executor);
  await backend.sync({
    plans: [GOLDEN_CASES.clusterip!],
    changed: new Set(),
    full: true,
  });
  assert.match(restores(executor.calls).at(-1)?.stdin ?? "", /^-X KUBE-SVC-AAAAAAAAAAAAAAAA$/m);
});

Deno.test("createIptablesBackend() uses ip6tables for IPv6 plans and ignores disabled families", async () => {
  const executor = new FakeExecutor();
  const backend = createIptablesBackend({
    executor,
    config: config({ backend: "legacy" }),
    families: ["IPv6"],
  });
  await backend.sync({
    plans: [emptyPlan("IPv4"), GOLDEN_CASES.ipv6!],
    changed: new Set(),
    full: true,
  });
  const programs = new Set(executor.calls.map((call) => call.program));
  assert.deepEqual([...programs].sort(), [
    "ip6tables-legacy-restore",
    "ip6tables-legacy-save",
    "ip6tables-nft-save", // the other variant, listed for leftovers
  ]);
});

Deno.test("createIptablesBackend() sets route_localnet only with localhostNodePorts", async () => {
  for (const localhostNodePorts of [false, true]) {
    const executor = new FakeExecutor();
    const backend = createIptablesBackend({
      executor,
      config: config({ backend: "nft", localhostNodePorts }),
      families: ["IPv4"],
    });
    await backend.sync({
      plans: [GOLDEN_CASES.nodeport!],
      changed: new Set(),
      full: true,
    });
    const sysctl = executor.calls.filter((call) => call.program === "sysctl");
    assert.deepEqual(
      sysctl.map((call) => call.args.join(" ")),
      localhostNodePorts ? ["-w net.ipv4.conf.all.route_localnet=1"] : [],
    );
    const input = restores(executor.calls).at(-1)?.stdin ?? "";
    assert.equal(/^-I INPUT -j KUBE-FIREWALL$/m.test(input), localhostNodePorts);
  }
});

Deno.test("createIptablesBackend() checkDrift() reports a missing canary chain", async () => {
  const executor = new FakeExecutor();
  const backend = nftBackend(executor);
  assert.equal(await backend.checkDrift!(), false);
  await backend.sync({
    plans: [GOLDEN_CASES.clusterip!],
    changed: new Set(),
    full: true,
  });
  executor.calls.length = 0;
  assert.equal(await backend.checkDrift!(), false);
  assert.deepEqual(executor.calls.map((call) => call.args.join(" ")), [
    "-w 5 -t mangle -n -L KUBE-PROXY-CANARY",
    "-w 5 -t nat -n -L KUBE-PROXY-CANARY",
    "-w 5 -t filter -n -L KUBE-PROXY-CANARY",
  ]);
  executor.reply({ code: 0 }, { code: 1, stderr: "No chain/target/match by that name." });
  assert.equal(await backend.checkDrift!(), true);
});

Deno.test("createIptablesBackend() leaves conntrack to the post-sync step", async () => {
  const executor = new FakeExecutor();
  const backend = nftBackend(executor);
  const dns = GOLDEN_CASES.hairpin_udp!;
  const moved = structuredClone(dns);
  const service = moved.services[0]!;
  service.internal.endpoints[0]!.ip = "10.244.0.4";
  service.external.endpoints[0]!.ip = "10.244.0.4";
  await backend.sync({ plans: [dns], changed: new Set(), full: true });
  await backend.sync({
    plans: [moved],
    changed: new Set([service.id]),
    full: false,
  });
  assert.equal(executor.calls.filter((call) => call.program === "conntrack").length, 0);
});

const NETNS_SKIP = await netnsSkipReason(["iptables-nft-restore", "iptables-legacy-restore"]);

Deno.test({
  name:
    "createIptablesBackend() syncs, detects drift and cleans up in a network namespace (nft and legacy)",
  ignore: NETNS_SKIP !== undefined,
  fn: async (t) => {
    const checker = await NetnsChecker.create("kp-ipt");
    const executor = new NetnsExecutor({ namespace: checker.name });
    const save = async (program: string) =>
      (await executor.run({ program, args: ["-t", "nat"] })).stdout;
    try {
      for (const variant of ["nft", "legacy"] as const) {
        await t.step(variant, async () => {
          const backend = createIptablesBackend({
            executor,
            config: config({ backend: variant }),
            families: ["IPv4"],
            nftChainsPerRestore: 3,
          });
          const result = await backend.sync({
            plans: [change.previous],
            changed: new Set(),
            full: true,
          });
          const scripts = Number(/in (\d+) scripts/.exec(result.summary ?? "")?.[1]);
          assert.ok(variant === "nft" ? scripts > 2 : scripts === 1, result.summary ?? "");
          // A second full sync must not duplicate the jumps.
          await backend.sync({
            plans: [change.previous],
            changed: new Set(),
            full: true,
          });
          const first = await save(`iptables-${variant}-save`);
          assert.equal(first.match(/-A PREROUTING .*-j KUBE-SERVICES/g)?.length, 1);
          const web = change.next.services.find((s) => s.name === "web")!;
          const removed = endpointChainName(
            web,
            change.previous.services.find((s) => s.name === "web")!.internal.endpoints[1]!,
          );
          // A chunked full sync writes chains in use under their alternate name.
          assert.match(first, new RegExp(`^:${removed}${variant === "nft" ? "-2" : ""} `, "m"));

          const partial = await backend.sync({
            plans: [change.next],
            changed: change.changed,
            full: false,
          });
          const second = await save(`iptables-${variant}-save`);
          const owned = async (table: string) =>
            (await executor.run({ program: `iptables-${variant}-save`, args: ["-t", table] }))
              .stdout.split("\n").filter((line) => line.startsWith("-A KUBE-")).length;
          assert.equal(partial.full, false);
          assert.deepEqual(
            partial.iptablesRules?.map((count) => count.total),
            [await owned("filter"), await owned("nat")],
            "the rule totals are what iptables-save lists in kproxy's chains",
          );
          assert.doesNotMatch(second, new RegExp(removed));
          assert.match(
            second,
            new RegExp(`-j ${endpointChainName(web, web.internal.endpoints[1]!)}`),
          );

          assert.equal(await backend.checkDrift!(), false);
          const flushed = await executor.run({
            program: `iptables-${variant}`,
            args: ["-t", "mangle", "-X", "KUBE-PROXY-CANARY"],
          });
          assert.equal(flushed.code, 0, flushed.stderr);
          assert.equal(await backend.checkDrift!(), true);

          await backend.cleanup();
          for (const table of ["nat", "filter", "mangle"]) {
            const left = await executor.run({
              program: `iptables-${variant}-save`,
              args: ["-t", table],
            });
            assert.doesNotMatch(left.stdout, /KUBE-/, `${variant} ${table} after cleanup`);
          }
        });
      }
    } finally {
      await checker.destroy();
    }
  },
});

Deno.test("createIptablesBackend() collects garbage every so many bytes of restore input, not after a small sync", async () => {
  const executor = new FakeExecutor();
  let collections = 0;
  const backend = createIptablesBackend({
    executor,
    config: config({ backend: "nft" }),
    families: ["IPv4"],
    nftChainsPerRestore: 20,
    garbage: { minBytes: 4096, collect: () => collections++ },
  });
  await backend.sync({ plans: [uniformCluster(30, 3)], changed: new Set(), full: true });
  const written = restores(executor.calls).reduce(
    (sum, call) => sum + (call.stdin ?? "").length,
    0,
  );
  assert.ok(written > 3 * 4096, `${written} bytes of input`);
  assert.ok(collections >= 2, `${collections} collections over ${written} bytes`);
  const afterFull = collections;
  const small = createIptablesBackend({
    executor: new FakeExecutor(),
    config: config({ backend: "nft" }),
    families: ["IPv4"],
    garbage: { minBytes: 1 << 20, collect: () => collections++ },
  });
  await small.sync({ plans: [change.previous], changed: new Set(), full: true });
  await small.sync({ plans: [change.next], changed: new Set(["x"]), full: false });
  assert.equal(collections, afterFull, "inputs below the budget collect nothing");
});

Deno.test("createIptablesBackend() collects the garbage of a large table reading before it renders", async () => {
  // A node with kube-proxy's rules of 1k Services: `iptables-save -t nat` is ~3.4 MB of text,
  // dead once parsed; collected only later, it lay under the first restore's input.
  const chains = Array.from(
    { length: 400 },
    (_, i) => `:KUBE-SEP-${String(i).padStart(16, "0")} - [0:0]`,
  );
  const nat = ["*nat", ...chains, "COMMIT", ""].join("\n");
  let collections = 0;
  let beforeFirstRestore: number | undefined;
  const executor = new FakeExecutor((command) => {
    if (command.program.endsWith("-restore") && beforeFirstRestore === undefined) {
      beforeFirstRestore = collections;
    }
    const stdout = command.program.endsWith("-save") && command.args.includes("nat") ? nat : "";
    return { code: 0, stdout, stderr: "" };
  });
  const backend = createIptablesBackend({
    executor,
    config: config({ backend: "nft" }),
    families: ["IPv4"],
    garbage: { minBytes: 4096, collect: () => collections++ },
  });
  await backend.sync({ plans: [change.previous], changed: new Set(), full: true });
  assert.ok(nat.length > 4096);
  assert.equal(beforeFirstRestore, 1, "one collection after the save was parsed");

  collections = 0;
  beforeFirstRestore = undefined;
  const small = createIptablesBackend({
    executor: new FakeExecutor((command) => {
      if (command.program.endsWith("-restore") && beforeFirstRestore === undefined) {
        beforeFirstRestore = collections;
      }
      return { code: 0, stdout: "", stderr: "" };
    }),
    config: config({ backend: "nft" }),
    families: ["IPv4"],
    garbage: { minBytes: 4096, collect: () => collections++ },
  });
  await small.sync({ plans: [change.previous], changed: new Set(), full: true });
  assert.equal(beforeFirstRestore, 0, "an empty table's reading collects nothing");
});
