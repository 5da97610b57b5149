/**
 * kproxy works under the restrictions of its systemd unit
 * (scripts/systemd/kproxy.service), reproduced without systemd as PID 1 by
 * tests/support/systemd_sandbox.ts: the bundle, under the permission flags
 * scripts/launch.ts computes, programs nftables (and iptables-legacy, which
 * needs a raw socket and the xtables lock) in a node namespace, sets a
 * network sysctl, serves /healthz, carries real traffic and follows an
 * endpoint change, with only CAP_NET_ADMIN and CAP_NET_RAW, the unit's
 * system call filter, and a read-only file system.
 *
 * @module
 */

import assert from "node:assert/strict";
import { launchArgs } from "../../scripts/launch.ts";
import { kernelUnavailableReason } from "../../scripts/netns.ts";
import { ADDRESSES, type Pod, Topology } from "../../scripts/netns.ts";
import { assertServedBy } from "../../scripts/testbed/traffic.ts";
import {
  manifestText,
  nodeObject,
  serviceObject,
  sliceObject,
} from "../../scripts/testbed/objects.ts";
import { bundleKproxy, waitFor } from "../../scripts/testbed/kproxy.ts";
import { sandboxed } from "../support/systemd_sandbox.ts";

const root = new URL("../../", import.meta.url).pathname;
const UNIT = `${root}scripts/systemd/kproxy.service`;
const WEB_IP = "10.96.0.10";

async function skipReason(): Promise<string | undefined> {
  const reason = await kernelUnavailableReason([
    "ip",
    "python3",
    "nft",
    "setpriv",
    "unshare",
    "systemd-analyze",
  ]);
  if (reason !== undefined) return reason;
  const seccomp = await new Deno.Command("python3", {
    args: ["-c", "import ctypes; ctypes.CDLL('libseccomp.so.2')"],
    stderr: "null",
  }).output();
  return seccomp.success ? undefined : "libseccomp.so.2 cannot be loaded from python3";
}

const skip = await skipReason();
if (skip) console.warn(`systemd sandbox test ignored: ${skip}`);

/** Reads a field of /proc/PID/status (with cat: Deno reads /proc only with every permission). */
async function procStatus(pid: number, field: string): Promise<string> {
  const out = await new Deno.Command("cat", { args: [`/proc/${pid}/status`] }).output();
  const status = new TextDecoder().decode(out.stdout);
  return new RegExp(`^${field}:\\s*(.*)$`, "m").exec(status)?.[1] ?? "";
}

async function inNode(topology: Topology, args: string[]): Promise<string> {
  const out = await new Deno.Command("ip", {
    args: ["netns", "exec", topology.node, ...args],
    stderr: "piped",
  }).output();
  return new TextDecoder().decode(out.stdout).trim();
}

/** Each mode, with flags that make it write a network sysctl (through the read-only /proc/sys). */
const MODES: { name: string; flags: string[]; sysctl: string }[] = [
  {
    name: "nftables",
    flags: [
      "--proxy-mode=nftables",
      "--conntrack-tcp-be-liberal=true",
      "--conntrack-max-per-core=0",
    ],
    sysctl: "/proc/sys/net/netfilter/nf_conntrack_tcp_be_liberal",
  },
  {
    // The legacy variant needs the raw socket (CAP_NET_RAW) and the xtables lock.
    name: "iptables (legacy)",
    flags: [
      "--proxy-mode=iptables",
      "--conntrack-max-per-core=0",
      "--iptables-backend=legacy",
      "--iptables-localhost-nodeports=true",
    ],
    sysctl: "/proc/sys/net/ipv4/conf/all/route_localnet",
  },
];

for (const mode of MODES) {
  Deno.test({
    name: `kproxy in ${mode.name} mode under its systemd unit's restrictions carries traffic`,
    ignore: skip !== undefined,
    sanitizeOps: false,
    sanitizeResources: false,
    async fn() {
      const topology = await Topology.create({
        prefix: `kp-sbx-${Topology.randomTag()}-`,
        localPods: 2,
        remotePods: 0,
        exitOnSigint: true,
      });
      const visible = await Deno.makeTempDir({ prefix: "kp-sbx-" });
      let child: Deno.ChildProcess | undefined;
      try {
        const [a1, a2] = topology.localPods as [Pod, Pod];
        await bundleKproxy(`${visible}/kproxy.js`);
        await Deno.mkdir(`${visible}/manifests`);
        const write = (pod: Pod) =>
          Deno.writeTextFile(
            `${visible}/manifests/all.json`,
            manifestText([
              nodeObject(),
              serviceObject({ name: "web", clusterIP: WEB_IP }),
              sliceObject("web", [pod.ipv4]),
            ]),
          );
        await write(a1);

        // Inside, the files are at /srv; the flags are launch's for that configuration.
        const argv = [
          "--manifests=/srv/manifests",
          "--hostname-override=node-a",
          ...mode.flags,
          `--cluster-cidr=${ADDRESSES.clusterCIDRV4}`,
          "-v=2",
        ];
        const denoArgs = launchArgs(argv).map((arg) =>
          arg.endsWith("/dist/kproxy.js") ? "/srv/kproxy.js" : arg
        );
        const unit = await Deno.readTextFile(UNIT);
        const command = await sandboxed(unit, {
          visible,
          command: [Deno.execPath(), ...denoArgs],
        });
        child = new Deno.Command("ip", {
          args: ["netns", "exec", topology.node, command.program, ...command.args],
          cwd: "/",
          env: {
            ...command.env,
            DENO_DIR: "/tmp/deno",
            DENO_NO_UPDATE_CHECK: "1",
            NO_COLOR: "1",
            RUST_BACKTRACE: "0",
          },
          stdin: "null",
          stdout: "null",
          stderr: "piped",
        }).spawn();
        const lines: string[] = [];
        const reading = (async () => {
          for await (const text of child.stderr.pipeThrough(new TextDecoderStream())) {
            lines.push(...text.split("\n"));
          }
        })();
        const logTail = () => lines.slice(-30).join("\n");
        let exited = false;
        child.status.then(() => exited = true);

        await waitFor("the first sync", () => {
          if (exited) throw new Error(`kproxy exited in the sandbox:\n${logTail()}`);
          return lines.some((l) => /Programmed the initial/.test(l));
        }, 60_000).catch((error) => {
          throw new Error(`${error.message}\n${logTail()}`);
        });
        await assertServedBy(topology, WEB_IP, 80, [a1]);

        // The restrictions hold on the running process.
        const pid = child.pid;
        assert.equal(await procStatus(pid, "CapEff"), "0000000000003000", "capabilities");
        assert.equal(await procStatus(pid, "NoNewPrivs"), "1");
        assert.equal(await procStatus(pid, "Seccomp"), "2", "no seccomp filter");
        // A network sysctl was written through the read-only /proc/sys.
        assert.equal(
          await inNode(topology, ["cat", mode.sysctl]),
          "1",
        );
        // /healthz answers from the client namespace.
        const healthz = await new Deno.Command("ip", {
          args: [
            "netns",
            "exec",
            topology.client,
            "python3",
            "-c",
            `import urllib.request; print(urllib.request.urlopen("http://${ADDRESSES.nodeV4}:10256/healthz", timeout=5).status)`,
          ],
          stderr: "piped",
        }).output();
        assert.equal(
          new TextDecoder().decode(healthz.stdout).trim(),
          "200",
          new TextDecoder().decode(healthz.stderr),
        );

        // A change still reaches the kernel.
        await write(a2);
        await waitFor("the endpoint change", async () => {
          try {
            await assertServedBy(topology, WEB_IP, 80, [a2]);
            return true;
          } catch {
            return false;
          }
        }, 30_000);
        assert.ok(
          !lines.some((l) => /Operation not permitted|Read-only file system|NotCapable/.test(l)),
          logTail(),
        );
        child.kill("SIGTERM");
        assert.equal((await child.status).code, 0, logTail());
        await reading;
        child = undefined;
      } finally {
        try {
          child?.kill("SIGKILL");
        } catch {
          // Already exited.
        }
        await child?.status;
        await Deno.remove(visible, { recursive: true });
        await topology.destroy();
      }
    },
  });
}
