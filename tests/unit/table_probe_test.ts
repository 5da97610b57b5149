import assert from "node:assert/strict";
import { existingTables } from "../../backends/nftables/table_probe.ts";
import { CommandError } from "../../lib/shell/exec.ts";
import { FakeExecutor } from "../support/fake_executor.ts";
import { isTableProbe, probedTable, tableProbeAnswer } from "../support/nft_table_probe.ts";

const PRESENT = new Set(["ip kproxy", "ip6 kube-proxy"]);

Deno.test("existingTables() tells a missing table from a missing chain without listing the table", async () => {
  const executor = new FakeExecutor((command) => tableProbeAnswer(command.args, PRESENT));
  const found = await existingTables(executor, ["ip", "ip6"], ["kproxy", "kube-proxy"]);
  assert.deepEqual(found, ["ip kproxy", "ip6 kube-proxy"]);
  // `nft -t list table` read every chain of the node: 3.3–6 s each beside 30k Services in iptables mode.
  for (const call of executor.calls) {
    assert.equal(call.program, "nft");
    assert.ok(isTableProbe(call.args), call.args.join(" "));
  }
  assert.deepEqual(executor.calls.map((call) => probedTable(call.args)), [
    "ip kproxy",
    "ip kube-proxy",
    "ip6 kproxy",
    "ip6 kube-proxy",
  ]);
});

Deno.test("existingTables() takes a chain of the probe's name as the table's", async () => {
  const executor = new FakeExecutor(() => ({
    code: 0,
    stdout: "table ip kproxy {\n}\n",
    stderr: "",
  }));
  assert.deepEqual(await existingTables(executor, ["ip"], ["kproxy"]), ["ip kproxy"]);
});

Deno.test("existingTables() lists the table when nft's answer does not say which object is missing", async () => {
  const executor = new FakeExecutor((command) => {
    if (isTableProbe(command.args)) {
      return { code: 1, stdout: "", stderr: "Error: No such file or directory\n" };
    }
    const present = command.args.join(" ") === "-t list table ip kproxy";
    return present
      ? { code: 0, stdout: "table ip kproxy {\n}\n", stderr: "" }
      : { code: 1, stdout: "", stderr: "Error: No such file or directory\n" };
  });
  assert.deepEqual(await existingTables(executor, ["ip"], ["kproxy", "kube-proxy"]), [
    "ip kproxy",
  ]);
  assert.deepEqual(executor.calls.filter((call) => !isTableProbe(call.args)).length, 2);
});

Deno.test("existingTables() fails on any other error", async () => {
  const executor = new FakeExecutor(() => ({
    code: 1,
    stdout: "",
    stderr: "Error: Could not process rule: Operation not permitted\n",
  }));
  await assert.rejects(existingTables(executor, ["ip"], ["kproxy"]), CommandError);
});
