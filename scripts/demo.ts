/**
 * `deno task demo`: kproxy moving real packets. As root it builds network
 * namespaces (a client, the node "node-a", pods on it and on a remote node),
 * runs kproxy in nftables mode inside the node namespace on a copy of
 * `scripts/manifests`, sends requests to the `web` cluster IP and the
 * `web-nodeport` node port printing which pod answered, then rewrites the
 * `web` EndpointSlice and shows traffic move. Everything is deleted at the
 * end, also on Ctrl-C. Without root it prints the plan instead and says why.
 *
 * @module
 */

import { ADDRESSES, kernelUnavailableReason, Topology } from "./netns.ts";

/** Where the demo writes its output. */
export interface DemoIO {
  stdout(text: string): void;
  stderr(text: string): void;
}

/** Options for {@linkcode runDemo}. */
export interface DemoOptions {
  /** Directory of the shipped manifests. @default {"scripts/manifests" next to this file} */
  manifestsDir?: string;
  /** kproxy's configuration, when called from `main.ts demo`: its `manifests` is used if set. */
  config?: { manifests: string };
  io?: DemoIO;
}

const REPO_ROOT = new URL("../", import.meta.url);
const WEB_IP = "10.96.0.10";
const NODE_PORT = 30080;
/** Manifests the demo copies: the nodes, `web` (ClusterIP) and `web-nodeport`. */
const DEMO_FILES = ["00-cluster.yaml", "10-web.yaml", "20-web-nodeport.yaml"];

const consoleIO: DemoIO = {
  stdout: (text) => Deno.stdout.writeSync(new TextEncoder().encode(text)),
  stderr: (text) => Deno.stderr.writeSync(new TextEncoder().encode(text)),
};

/**
 * Runs the demo and returns the process exit status.
 *
 * @example Usage
 * ```ts ignore
 * Deno.exit(await runDemo({ manifestsDir: "scripts/manifests" }));
 * ```
 */
export async function runDemo(options: DemoOptions = {}): Promise<number> {
  const io = options.io ?? consoleIO;
  const manifestsDir = options.manifestsDir || options.config?.manifests ||
    new URL("./manifests", import.meta.url).pathname;
  const reason = await kernelUnavailableReason(["ip", "nft", "python3"]);
  if (reason !== undefined) {
    io.stderr(
      `kproxy demo: cannot move real packets here (${reason}); printing the plan instead\n`,
    );
    return await printPlan(io, manifestsDir);
  }
  return await new Demo(io, manifestsDir).run();
}

async function printPlan(io: DemoIO, manifestsDir: string): Promise<number> {
  const output = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "--allow-read",
      "--allow-env",
      "--ignore-env",
      "main.ts",
      "plan",
      "--manifests",
      manifestsDir,
      "--hostname-override",
      "node-a",
    ],
    cwd: REPO_ROOT.pathname,
    stdout: "piped",
    stderr: "piped",
  }).output();
  io.stdout(new TextDecoder().decode(output.stdout));
  io.stderr(new TextDecoder().decode(output.stderr));
  return output.code;
}

class Demo {
  readonly #io: DemoIO;
  readonly #manifestsDir: string;
  #topology?: Topology;
  #kproxy?: Deno.ChildProcess;
  #workDir?: string;
  readonly #onSigint = () => {
    this.#io.stderr("\ninterrupted: cleaning up\n");
    this.#stopKproxy();
    this.#removeWorkDir();
    // Exiting runs the topology's unload handler, which deletes the namespaces.
    Deno.exit(130);
  };

  constructor(io: DemoIO, manifestsDir: string) {
    this.#io = io;
    this.#manifestsDir = manifestsDir;
  }

  async run(): Promise<number> {
    Deno.addSignalListener("SIGINT", this.#onSigint);
    const started = performance.now();
    try {
      await this.#steps();
      this.#say(`done in ${((performance.now() - started) / 1000).toFixed(1)} s`);
      return 0;
    } catch (error) {
      this.#io.stderr(`kproxy demo failed: ${error instanceof Error ? error.message : error}\n`);
      await this.#printKproxyLog();
      return 1;
    } finally {
      Deno.removeSignalListener("SIGINT", this.#onSigint);
      this.#stopKproxy();
      await this.#kproxy?.status.catch(() => undefined);
      await this.#topology?.destroy();
      this.#removeWorkDir();
      this.#say("namespaces and temporary files deleted");
    }
  }

  async #steps(): Promise<void> {
    this.#workDir = await Deno.makeTempDir({ prefix: "kproxy-demo-" });
    await this.#copyManifests();
    this.#say("building namespaces: client, node-a (kproxy), 2 pods on node-a, 2 on node-b");
    const topology = await Topology.create({
      prefix: `kp-d-${Topology.randomTag()}-`,
      localPods: 2,
      remotePods: 2,
      serverLifetimeSeconds: 120,
    });
    this.#topology = topology;
    this.#say(
      `node-a is ${ADDRESSES.nodeV4}; pods: ` +
        topology.pods.map((pod) => `${pod.name}=${pod.ipv4}`).join(" "),
    );
    this.#startKproxy(topology.node);
    this.#say("kproxy --proxy-mode=nftables is running in node-a; waiting for its first sync");
    await this.#waitFor(() => this.#answers(WEB_IP, 80, 1), (pods) => pods.length === 1, 20_000);

    await this.#show(`web (cluster IP ${WEB_IP}:80)`, WEB_IP, 80);
    await this.#show(
      `web-nodeport (node port ${ADDRESSES.nodeV4}:${NODE_PORT})`,
      ADDRESSES.nodeV4,
      NODE_PORT,
    );

    this.#say("moving web's endpoint from pod-b1 (node-b) to pod-a2 (node-a) in 10-web.yaml");
    await this.#rewriteWebSlice();
    await this.#waitFor(
      () => this.#answers(WEB_IP, 80, 12),
      (pods) => pods.length === 12 && pods.every((pod) => pod === "pod-a1" || pod === "pod-a2"),
      15_000,
    );
    await this.#show(`web after the change`, WEB_IP, 80);
  }

  async #copyManifests(): Promise<void> {
    for (const file of DEMO_FILES) {
      let text = await Deno.readTextFile(`${this.#manifestsDir}/${file}`);
      if (file === "00-cluster.yaml") {
        // Give the nodes the addresses they have in the demo's namespaces.
        text = text
          .replaceAll("10.200.0.2", ADDRESSES.nodeV4)
          .replaceAll("fd00:200::2", ADDRESSES.nodeV6)
          .replaceAll("10.200.0.3", ADDRESSES.remoteNodeV4)
          .replaceAll("fd00:200::3", ADDRESSES.remoteNodeV6);
      }
      await Deno.writeTextFile(`${this.#workDir}/${file}`, text);
    }
  }

  async #rewriteWebSlice(): Promise<void> {
    const path = `${this.#workDir}/10-web.yaml`;
    const text = await Deno.readTextFile(path);
    const moved = text
      .replace("addresses: [10.244.2.10]", "addresses: [10.244.1.11]")
      .replace("nodeName: node-b", "nodeName: node-a")
      .replace("zone: zone-b", "zone: zone-a");
    if (moved === text) throw new Error(`Cannot rewrite ${path}: endpoint 10.244.2.10 not found`);
    await Deno.writeTextFile(`${path}.tmp`, moved);
    await Deno.rename(`${path}.tmp`, path);
  }

  #startKproxy(namespace: string): void {
    this.#kproxy = new Deno.Command("ip", {
      args: [
        "netns",
        "exec",
        namespace,
        Deno.execPath(),
        "run",
        "--allow-all",
        "--ignore-env",
        "main.ts",
        "--proxy-mode=nftables",
        // The demo's node is a network namespace: nf_conntrack_max is the host's.
        "--conntrack-max-per-core=0",
        "--manifests",
        this.#workDir!,
        "--hostname-override",
        "node-a",
        "--healthz-bind-address",
        "127.0.0.1:0",
        "--metrics-bind-address",
        "127.0.0.1:0",
      ],
      cwd: REPO_ROOT.pathname,
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    for (
      const [stream, file] of [[this.#kproxy.stdout, "kproxy.log"], [
        this.#kproxy.stderr,
        "kproxy.err",
      ]] as const
    ) {
      const sink = Deno.openSync(`${this.#workDir}/${file}`, { write: true, create: true });
      stream.pipeTo(sink.writable).catch(() => undefined);
    }
  }

  #stopKproxy(): void {
    try {
      this.#kproxy?.kill("SIGTERM");
    } catch {
      // Already exited.
    }
  }

  #removeWorkDir(): void {
    if (this.#workDir === undefined) return;
    try {
      Deno.removeSync(this.#workDir, { recursive: true });
    } catch {
      // Already removed.
    }
    this.#workDir = undefined;
  }

  async #printKproxyLog(): Promise<void> {
    if (this.#workDir === undefined) return;
    for (const file of ["kproxy.log", "kproxy.err"]) {
      const text = await Deno.readTextFile(`${this.#workDir}/${file}`).catch(() => "");
      if (text.trim() !== "") {
        this.#io.stderr(
          `--- ${file} (last lines) ---\n${text.split("\n").slice(-20).join("\n")}\n`,
        );
      }
    }
  }

  /** The pods that answered `count` TCP requests from the client ("-" for a failed request). */
  async #answers(ip: string, port: number, count: number): Promise<string[]> {
    const replies = await this.#topology!.requests(
      this.#topology!.client,
      Array.from({ length: count }, () => ({ protocol: "TCP" as const, ip, port, timeoutMs: 500 })),
    );
    return replies.map((reply) => (reply.ok ? reply.pod : "-"));
  }

  async #show(label: string, ip: string, port: number): Promise<void> {
    const replies = await this.#topology!.requests(
      this.#topology!.client,
      Array.from({ length: 6 }, () => ({ protocol: "TCP" as const, ip, port, timeoutMs: 500 })),
    );
    this.#say(`client -> ${label}:`);
    for (const reply of replies) {
      this.#io.stdout(
        reply.ok
          ? `    answered by ${reply.pod.padEnd(7)} (it saw the request come from ${reply.peer})\n`
          : `    ${reply.error}: ${reply.detail}\n`,
      );
    }
  }

  async #waitFor(
    probe: () => Promise<string[]>,
    done: (pods: string[]) => boolean,
    timeoutMs: number,
  ): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    let last: string[] = [];
    while (Date.now() < deadline) {
      if (this.#kproxy && (await Promise.race([this.#kproxy.status, delay(0)]))) {
        throw new Error("kproxy exited early");
      }
      last = await probe();
      if (done(last)) return;
      await delay(300);
    }
    throw new Error(`Cannot see the expected traffic after ${timeoutMs} ms: last answers ${last}`);
  }

  #say(text: string): void {
    this.#io.stdout(`== ${text}\n`);
  }
}

function delay(ms: number): Promise<undefined> {
  return new Promise((resolve) => setTimeout(() => resolve(undefined), ms));
}

if (import.meta.main) {
  Deno.exit(await runDemo());
}
