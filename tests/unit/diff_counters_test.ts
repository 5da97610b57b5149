/**
 * `kproxy diff` on a host without nfacct: Service counters are off, as for a running kproxy
 * (lib/commands/app.ts), instead of failing on the scratch namespace's `nfacct restore`.
 */

import assert from "node:assert/strict";
import { main } from "../../lib/commands/app.ts";
import { CommandError } from "../../lib/shell/exec.ts";
import { FakeExecutor } from "../support/fake_executor.ts";

Deno.test("main() diff in iptables mode runs without Service counters when nfacct is not installed", async () => {
  const executor = new FakeExecutor((command) => {
    const program = command.program === "ip" && command.args[1] === "exec"
      ? command.args[3]
      : command.program;
    if (program === "nfacct") {
      if (command.program === "ip") {
        return {
          code: 1,
          stdout: "",
          stderr: 'exec of "nfacct" failed: No such file or directory\n',
        };
      }
      throw new CommandError(command, undefined, 'Cannot run "nfacct": program not found in PATH');
    }
    return { code: 0, stdout: "", stderr: "" };
  });
  const stderr: string[] = [];
  const stdout: string[] = [];
  const code = await main([
    "diff",
    "--proxy-mode=iptables",
    "--manifests=scripts/manifests",
    "--hostname-override=node-a",
  ], {
    executor,
    setupLogging: false,
    io: { stdout: (text) => stdout.push(text), stderr: (text) => stderr.push(text) },
  });
  assert.doesNotMatch(stderr.join(""), /nfacct/, stderr.join(""));
  assert.equal(code, 0, "the fake lists nothing on either side: in sync");
  assert.ok(
    !executor.calls.some((call) => call.args.includes("nfacct")),
    "nothing loads nfacct objects into the scratch namespace",
  );
  assert.match(stdout.join(""), /^in sync/);
});
