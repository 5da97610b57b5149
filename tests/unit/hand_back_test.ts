/**
 * `kproxy hand-back` says what it waits for, how long is left while it waits, and on timeout
 * what was missing (backends/hand_back.ts).
 */

import assert from "node:assert/strict";
import { defaultConfig } from "../../lib/config/defaults.ts";
import { handBackToKubeProxy } from "../../backends/registry.ts";
import { CommandError } from "../../lib/shell/exec.ts";
import { FakeExecutor } from "../support/fake_executor.ts";
import { isTableProbe, probedTable, tableProbeAnswer } from "../support/nft_table_probe.ts";
import { withLogRecords } from "../support/logs.ts";

/** A node with kproxy's tables; kube-proxy's appear after `kubeProxyAfter` looks (never: Infinity). */
function node(kubeProxyAfter: number): FakeExecutor {
  let looks = 0;
  return new FakeExecutor((command) => {
    if (command.program === "nft" && command.args.includes("list")) {
      // Each table asked for by name, never every table.
      assert.ok(isTableProbe(command.args), command.args.join(" "));
      const table = probedTable(command.args);
      if (table === "ip kube-proxy") looks++;
      const present = table === "ip kproxy" || table === "ip6 kproxy" ||
        (table === "ip kube-proxy" && looks > kubeProxyAfter);
      return tableProbeAnswer(command.args, new Set(present ? [table] : []));
    }
    if (command.program === "iptables-legacy-save") {
      throw new CommandError(
        command,
        undefined,
        'Cannot run "iptables-legacy-save": program not found in PATH',
      );
    }
    if (command.program === "iptables-nft-save") {
      return { code: 0, stdout: "*nat\n:PREROUTING ACCEPT [0:0]\nCOMMIT\n", stderr: "" };
    }
    return { code: 0, stdout: "", stderr: "" };
  });
}

function messages(records: { message: readonly unknown[] }[]): string[] {
  return records.map((record) => record.message.map(String).join(""));
}

Deno.test("handBackToKubeProxy() says what it waits for, then how long is left, periodically", async () => {
  await withLogRecords(["kproxy"], async (records) => {
    const outcome = await handBackToKubeProxy({
      config: defaultConfig("node-a"),
      executor: node(12),
      timeoutMs: 60_000,
      pollMs: 10,
      progressEveryMs: 40,
    });
    assert.equal(outcome.outcome, "removed");
    const lines = messages(records);
    assert.match(
      lines[0]!,
      /^Waiting up to 1m0s for kube-proxy's rules \(the nftables table ip kube-proxy, or a KUBE-SERVICES jump in iptables' nat PREROUTING\) before removing kproxy's tables ip kproxy, ip6 kproxy$/,
    );
    const waiting = lines.filter((line) => line.startsWith("Still waiting"));
    assert.ok(waiting.length >= 1, lines.join("\n"));
    assert.match(waiting[0]!, /^Still waiting for kube-proxy's rules: (\d+m)?\d+(\.\d+)?s left$/);
    assert.ok(lines.some((line) => /kube-proxy's rules are in the kernel/.test(line)));
  });
});

Deno.test("handBackToKubeProxy() names what was missing when it times out", async () => {
  await withLogRecords(["kproxy"], async (records) => {
    const outcome = await handBackToKubeProxy({
      config: defaultConfig("node-a"),
      executor: node(Infinity),
      timeoutMs: 300,
      pollMs: 10,
      progressEveryMs: 100,
    });
    assert.equal(outcome.outcome, "timed out");
    assert.equal(
      outcome.message,
      "Cannot hand back: after 300ms kube-proxy's rules are not in the kernel " +
        "(no nftables table ip kube-proxy; iptables-nft-save: no KUBE-SERVICES jump in nat PREROUTING; " +
        "iptables-legacy-save: not installed); kproxy's rules stay",
    );
    const waiting = messages(records).filter((line) => line.startsWith("Still waiting"));
    assert.ok(waiting.length >= 2, messages(records).join("\n"));
  });
});
