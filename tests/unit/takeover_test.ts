import assert from "node:assert/strict";
import { defaultConfig } from "../../lib/config/defaults.ts";
import { FakeExecutor, type RecordedCommand } from "../support/fake_executor.ts";
import { LeftoverRemoval } from "../../lib/shell/takeover.ts";
import { ManualSource, startKproxy, waitFor } from "../../scripts/testbed/kproxy.ts";
import { serviceObject, sliceObject } from "../../scripts/testbed/objects.ts";

const LISTED_TABLES = "table ip kube-proxy\ntable ip6 kube-proxy\n";

/** A node as the commands see it: kube-proxy's nftables tables are there. */
function node(): FakeExecutor {
  return new FakeExecutor((command) => {
    if (command.program === "nft" && command.args[0] === "list") {
      return { code: 0, stdout: LISTED_TABLES, stderr: "" };
    }
    if (command.program === "ip") return { code: 1, stdout: "", stderr: "no kube-ipvs0" };
    return { code: 0, stdout: "", stderr: "" };
  });
}

function line(call: RecordedCommand): string {
  return [call.program, ...call.args].join(" ");
}

const OBJECTS = [
  serviceObject({ name: "web", clusterIP: "10.96.0.10" }),
  sliceObject("web", ["10.244.1.10"]),
];

Deno.test("main() in nftables mode programs first, then removes other modes' leftovers", async () => {
  const executor = node();
  const kproxy = await startKproxy({ source: ManualSource.listed(OBJECTS), executor });
  try {
    await waitFor(
      "the leftovers removed",
      () => executor.calls.some((call) => line(call) === "ipset list -n"),
    );
  } finally {
    await kproxy.stop();
  }
  const calls = executor.calls.map(line);
  // The first write of kproxy's tables (the load guard's own set-up goes before it).
  const firstWrite = executor.calls.findIndex((call) =>
    line(call) === "nft -f -" && /^add table ip kproxy\n/m.test(call.stdin ?? "")
  );
  assert.ok(firstWrite >= 0, calls.join("\n"));
  const write = executor.calls[firstWrite]!.stdin!;
  assert.ok(
    write.endsWith(
      "add table ip kube-proxy\ndelete table ip kube-proxy\n" +
        "add table ip6 kube-proxy\ndelete table ip6 kube-proxy\n" +
        "flush chain ip kproxy-guard switch\n",
    ),
    "kube-proxy's tables go in the transaction of the first write",
  );
  const otherModes = calls.findIndex((call) =>
    /^(iptables|ip6tables)-|^ipvsadm|^ipset|^ip -o/.test(call)
  );
  assert.ok(otherModes > firstWrite, `other modes touched before the first write:\n${calls}`);
});

Deno.test("main() in iptables mode removes kube-proxy's nftables tables only after its first restore", async () => {
  const executor = node();
  const kproxy = await startKproxy({
    source: ManualSource.listed(OBJECTS),
    executor,
    args: ["--proxy-mode=iptables", "--iptables-backend=nft"],
  });
  try {
    await waitFor(
      "the leftovers removed",
      () => executor.calls.some((call) => line(call) === "ipset list -n"),
    );
  } finally {
    await kproxy.stop();
  }
  const calls = executor.calls.map(line);
  const firstRestore = calls.findIndex((call) => /^iptables-nft-restore /.test(call));
  const deletion = executor.calls.findIndex((call) =>
    line(call) === "nft -f -" && /delete table ip kube-proxy/.test(call.stdin ?? "")
  );
  assert.ok(firstRestore >= 0 && deletion > firstRestore, calls.join("\n"));
});

Deno.test("LeftoverRemoval retries a mode that failed after the next full sync only", async () => {
  let nftWorks = false;
  const executor = new FakeExecutor((command) => {
    if (command.program === "nft") {
      return nftWorks
        ? { code: 0, stdout: "", stderr: "" }
        : { code: 1, stdout: "", stderr: "Error: Operation not permitted" };
    }
    if (command.program === "ip") return { code: 1, stdout: "", stderr: "no kube-ipvs0" };
    return { code: 0, stdout: "", stderr: "" };
  });
  const removal = new LeftoverRemoval({
    config: { ...defaultConfig("node-a"), proxyMode: "iptables" },
    executor,
  });
  assert.deepEqual(removal.pending, ["nftables", "ipvs"]);
  await removal.afterSync({ full: true });
  assert.deepEqual(removal.pending, ["nftables"]);
  nftWorks = true;
  const before = executor.calls.length;
  await removal.afterSync({ full: false });
  assert.equal(executor.calls.length, before, "a partial sync retries nothing");
  await removal.afterSync({ full: true });
  assert.deepEqual(removal.pending, []);
});

Deno.test("LeftoverRemoval deletes the iptables mode's counters without holding the sync loop", async () => {
  const names = [
    "KP-CONN4-AAAAAAAAAAAAAAAA",
    "KP-NOEP4-BBBBBBBBBBBBBBBB",
    "KP-CONN6-CCCCCCCCCCCCCCCC",
  ];
  const zero = "00000000000000000000";
  const listed = [...names, "localhost_nps_accepted_pkts"]
    .map((name) => `{ pkts = ${zero}, bytes = ${zero} } = ${name};`)
    .join("\n");
  let release!: () => void;
  const held = new Promise<void>((resolve) => (release = resolve));
  const executor = new FakeExecutor(async (command) => {
    if (command.program === "nfacct" && command.args[0] === "list") {
      return { code: 0, stdout: listed, stderr: "" };
    }
    if (command.program === "nfacct" && command.args[0] === "del") await held;
    if (command.program === "ip") return { code: 1, stdout: "", stderr: "no kube-ipvs0" };
    return { code: 0, stdout: "", stderr: "" };
  });
  const deleted = () =>
    executor.calls.filter((call) => call.program === "nfacct" && call.args[0] === "del")
      .map((call) => call.args[1]);
  const removal = new LeftoverRemoval({
    config: { ...defaultConfig("node-a"), proxyMode: "nftables" },
    executor,
  });
  // One nfacct process per object (nfacct has no batch delete): 10k Services held the next sync for tens of seconds.
  let timer: ReturnType<typeof setTimeout> | undefined;
  const stuck = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error("afterSync waited for the deletions")), 5000);
  });
  try {
    await Promise.race([removal.afterSync({ full: true }), stuck]);
  } finally {
    clearTimeout(timer);
  }
  assert.deepEqual(removal.pending, []);
  assert.ok(
    deleted().length <= 1,
    "the deletions wait behind the first one; the sync loop goes on",
  );
  assert.equal(removal.running, 1);
  release();
  await removal.settled();
  assert.deepEqual(deleted(), names, "kube-proxy's own counter is left alone");
  assert.equal(removal.running, 0);
});

Deno.test("LeftoverRemoval holds no deletion once it has ended", async () => {
  const executor = new FakeExecutor((command) => {
    if (command.program === "nfacct" && command.args[0] === "list") {
      return {
        code: 0,
        stdout: "{ pkts = 0, bytes = 0 } = KP-CONN4-AAAAAAAAAAAAAAAA;",
        stderr: "",
      };
    }
    if (command.program === "nfacct" && command.args[0] === "del") {
      return { code: 1, stdout: "", stderr: "busy" };
    }
    if (command.program === "ip") return { code: 1, stdout: "", stderr: "no kube-ipvs0" };
    return { code: 0, stdout: "", stderr: "" };
  });
  const removal = new LeftoverRemoval({
    config: { ...defaultConfig("node-a"), proxyMode: "nftables" },
    executor,
  });
  await removal.afterSync({ full: true });
  const ended = () =>
    executor.calls.some((call) => call.program === "nfacct" && call.args[0] === "del");
  while (!ended()) await new Promise((resolve) => setTimeout(resolve, 1));
  await new Promise((resolve) => setTimeout(resolve, 10));
  assert.equal(removal.running, 0, "a long-running proxy keeps no settled deletion");
});
