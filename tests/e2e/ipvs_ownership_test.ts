/**
 * kproxy never touches IPVS state it did not create: a stub `ipvsadm` first
 * in PATH records every call and answers with a recorded listing that holds a
 * foreign virtual server (keepalived's) beside one bound to `kube-ipvs0`.
 * Runs main.ts in a network namespace, where `kube-ipvs0` is a veth (this
 * kernel has neither IPVS nor dummy interfaces).
 */
import assert from "node:assert/strict";
import { KproxyProcess } from "../../scripts/testbed/kproxy.ts";
import { manifestText, serviceObject, sliceObject } from "../../scripts/testbed/objects.ts";
import { netnsSkipReason } from "../support/netns_check.ts";

/** The system PATH (the test runs with `--ignore-env`, so it cannot read its own). */
const SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

const SKIP = await netnsSkipReason(["nft", "iptables-nft-restore"]);

const LIST = `IP Virtual Server version 1.2.1 (size=4096)
Prot LocalAddress:Port Scheduler Flags
  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn
TCP  192.0.2.10:80 wlc
  -> 192.0.2.21:80                Route   1      0          0
TCP  10.96.0.10:80 rr
  -> 10.244.1.10:8080             Masq    1      0          0
`;

const SAVE = `-A -t 192.0.2.10:80 -s wlc
-a -t 192.0.2.10:80 -r 192.0.2.21:80 -g -w 1
-A -t 10.96.0.10:80 -s rr
-a -t 10.96.0.10:80 -r 10.244.1.10:8080 -m -w 1
`;

/** A directory with an `ipvsadm` that logs its arguments (and restore input) to `calls`. */
async function stubIpvsadm(): Promise<{ dir: string; calls: () => Promise<string[]> }> {
  const dir = await Deno.makeTempDir({ prefix: "kp-ipvsadm-" });
  await Deno.writeTextFile(`${dir}/list`, LIST);
  await Deno.writeTextFile(`${dir}/save`, SAVE);
  await Deno.writeTextFile(
    `${dir}/ipvsadm`,
    `#!/bin/sh
echo "ipvsadm $*" >> "${dir}/calls"
case "$*" in
  -Ln) cat "${dir}/list" ;;
  -Sn) cat "${dir}/save" ;;
  --restore) sed 's/^/  stdin: /' >> "${dir}/calls" ;;
esac
exit 0
`,
  );
  await Deno.chmod(`${dir}/ipvsadm`, 0o755);
  return {
    dir,
    calls: async () => {
      try {
        return (await Deno.readTextFile(`${dir}/calls`)).split("\n").filter((line) => line);
      } catch {
        return [];
      }
    },
  };
}

async function inNamespace(ns: string, ...args: string[]): Promise<string> {
  const output = await new Deno.Command("ip", { args: ["netns", "exec", ns, ...args] }).output();
  const text = new TextDecoder();
  if (!output.success) throw new Error(`${args.join(" ")}: ${text.decode(output.stderr)}`);
  return text.decode(output.stdout);
}

/** Every call that changes IPVS state: anything but a listing. */
function changes(calls: string[]): string[] {
  return calls.filter((line) => !/^ipvsadm -[LS]n$/.test(line));
}

const OBJECTS = manifestText([
  serviceObject({ name: "web", clusterIP: "10.96.0.10" }),
  sliceObject("web", ["10.244.1.10"]),
]);

Deno.test({
  name: "kproxy removes only the IPVS virtual servers bound to kube-ipvs0, never ipvsadm -C",
  ignore: SKIP !== undefined,
  async fn(t) {
    const manifests = await Deno.makeTempDir({ prefix: "kp-ipvs-own-" });
    await Deno.writeTextFile(`${manifests}/objects.yaml`, OBJECTS);
    const namespaces: string[] = [];
    const stubs: string[] = [];
    /** A namespace and a stub; with `bound`, a kube-ipvs0 holding 10.96.0.10. */
    const node = async (bound: boolean) => {
      const ns = `kp-ipvs-${crypto.randomUUID().slice(0, 8)}`;
      await new Deno.Command("ip", { args: ["netns", "add", ns] }).output();
      namespaces.push(ns);
      await inNamespace(ns, "ip", "link", "set", "lo", "up");
      if (bound) {
        await inNamespace(ns, "ip", "link", "add", "kube-ipvs0", "type", "veth", "peer", "kipvs0");
        await inNamespace(ns, "ip", "addr", "add", "10.96.0.10/32", "dev", "kube-ipvs0");
      }
      const stub = await stubIpvsadm();
      stubs.push(stub.dir);
      return { ns, stub, path: `${stub.dir}:${SYSTEM_PATH}` };
    };
    const runUntilTakenOver = async (ns: string, path: string, mode: string) => {
      const kproxy = new KproxyProcess({
        namespace: ns,
        path,
        args: [`--proxy-mode=${mode}`, "--manifests", manifests, "-v=4"],
      });
      try {
        await kproxy.waitForLine(/Leftovers of the .* modes checked/, 30_000);
      } finally {
        await kproxy.kill("SIGTERM");
      }
    };
    try {
      for (const mode of ["nftables", "iptables"]) {
        await t.step(
          `a start in ${mode} mode with no kube-ipvs0 changes no IPVS state`,
          async () => {
            const { ns, stub, path } = await node(false);
            await runUntilTakenOver(ns, path, mode);
            assert.deepEqual(changes(await stub.calls()), []);
          },
        );
        await t.step(
          `a start in ${mode} mode removes kube-proxy's virtual server only`,
          async () => {
            const { ns, stub, path } = await node(true);
            await runUntilTakenOver(ns, path, mode);
            assert.deepEqual(changes(await stub.calls()), [
              "ipvsadm --restore",
              "  stdin: -D -t 10.96.0.10:80",
            ]);
            assert.doesNotMatch(await inNamespace(ns, "ip", "link"), /kube-ipvs0/);
          },
        );
      }
      await t.step("--cleanup removes kube-ipvs0's virtual server only", async () => {
        const { ns, stub, path } = await node(true);
        const kproxy = new KproxyProcess({
          namespace: ns,
          path,
          args: ["--cleanup", "--manifests", manifests],
        });
        assert.equal((await kproxy.child.status).code, 0, kproxy.lines.join("\n"));
        assert.deepEqual(changes(await stub.calls()), [
          "ipvsadm --restore",
          "  stdin: -D -t 10.96.0.10:80",
        ]);
      });
    } finally {
      for (const ns of namespaces) {
        await new Deno.Command("ip", { args: ["netns", "del", ns] }).output();
      }
      for (const dir of [manifests, ...stubs]) await Deno.remove(dir, { recursive: true });
    }
  },
});
