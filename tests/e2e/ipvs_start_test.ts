/**
 * The ipvs mode on a node that cannot run it exits at start with status 1
 * and one line naming what is missing, before it serves health (as
 * kube-proxy does). This kernel has no IPVS, so the first case is real.
 * Only kproxy's words are asserted: ipvsadm's differ between hosts.
 */
import assert from "node:assert/strict";
import { kernelUnavailableReason } from "../../scripts/netns.ts";
import { ipvsUnavailableReason } from "../kernel/netns.ts";

const MAIN = new URL("../../main.ts", import.meta.url).pathname;
const SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

const SKIP = await kernelUnavailableReason(["ip", "ipvsadm"]);
if (SKIP !== undefined) console.warn(`ipvs start tests ignored: ${SKIP}`);
const IPVS_PRESENT = SKIP === undefined && await ipvsUnavailableReason() === undefined;
if (IPVS_PRESENT) console.warn("the no-IPVS start test ignored: this kernel has IPVS");

/** Runs `main.ts --proxy-mode=ipvs` in a fresh namespace with `path`; kills it after 20 s. */
async function startIpvs(path: string) {
  const ns = `kp-ipvs-${crypto.randomUUID().slice(0, 8)}`;
  await new Deno.Command("ip", { args: ["netns", "add", ns] }).output();
  try {
    const manifests = await Deno.makeTempDir({ prefix: "kp-ipvs-start-" });
    try {
      const output = await new Deno.Command("ip", {
        args: [
          ...["netns", "exec", ns, "/usr/bin/env", `PATH=${path}`, "RUST_BACKTRACE=0"],
          ...[Deno.execPath(), "run", "-A", MAIN],
          ...["--proxy-mode=ipvs", "--manifests", manifests, "--hostname-override=node-a"],
          "--healthz-bind-address=127.0.0.1:10256",
        ],
        stdin: "null",
        signal: AbortSignal.timeout(20_000),
      }).output();
      const text = new TextDecoder();
      return { code: output.code, stderr: text.decode(output.stderr) };
    } finally {
      await Deno.remove(manifests, { recursive: true });
    }
  } finally {
    await new Deno.Command("ip", { args: ["netns", "del", ns] }).output();
  }
}

Deno.test({
  name: "main.ts in ipvs mode exits 1 with one line when the kernel has no IPVS",
  ignore: SKIP !== undefined || IPVS_PRESENT,
  async fn() {
    const { code, stderr } = await startIpvs(SYSTEM_PATH);
    assert.equal(code, 1, stderr);
    // ipvsadm's own words vary with the host (with kmod installed it first reports modprobe's
    // "Module ip_vs not found"): assert kproxy's words, and that it passes the tool's on.
    assert.match(
      stderr,
      /^kproxy: Cannot use the ipvs proxy mode: the kernel has no IPVS support \(ipvsadm -Ln: \S[^\n]*\)\n$/,
    );
  },
});

Deno.test({
  name: "main.ts in ipvs mode exits 1 with one line when ipvsadm is missing",
  ignore: SKIP !== undefined,
  async fn() {
    const empty = await Deno.makeTempDir({ prefix: "kp-no-ipvsadm-" });
    try {
      const { code, stderr } = await startIpvs(empty);
      assert.equal(code, 1, stderr);
      assert.match(
        stderr,
        /^kproxy: Cannot use the ipvs proxy mode: ipvsadm is not available \(program not found in PATH\)\n$/,
      );
    } finally {
      await Deno.remove(empty);
    }
  },
});
