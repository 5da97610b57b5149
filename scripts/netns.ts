/**
 * Network-namespace topologies for kernel tests and the demo: an external
 * client, the node where kproxy runs, pods on the node, and an optional
 * remote node with pods of its own. Pods run a tiny echo server that answers
 * TCP and UDP with `<pod-name> <peer-ip> <port>`, so a caller sees which backend
 * and port answered and which source address it saw.
 *
 * ```
 *  client ──veth── node ──veth── pod-a1, pod-a2, …   (10.244.1.10, .11, …)
 *  10.201.0.2      10.201.0.1
 *  10.201.0.3      │
 *                  └──veth── node-b ──veth── pod-b1, … (10.244.2.10, …)
 *                  10.202.0.1  10.202.0.2
 * ```
 *
 * Every namespace name starts with the caller's prefix; {@linkcode Topology.destroy}
 * kills the servers and deletes every namespace, and an `unload` handler does
 * the same if the process ends first.
 *
 * @module
 */

import type { Command, CommandResult, Executor } from "../lib/core/executor.ts";
import { missingProgramError, runChecked, spawnCommand } from "../lib/shell/exec.ts";

/** Runs every command inside one network namespace through `ip netns exec`. */
export class NetnsExecutor implements Executor {
  readonly #namespace: string;
  readonly #inner: Executor;

  /** `inner` runs the resulting `ip netns exec <ns> …` command. */
  constructor(options: { namespace: string; inner?: Executor }) {
    this.#namespace = options.namespace;
    this.#inner = options.inner ?? new HostExecutor();
  }

  /** The namespace commands run in. */
  get namespace(): string {
    return this.#namespace;
  }

  /**
   * Runs `command` inside the namespace; stdin and timeout pass through. A program the host
   * lacks fails as it would on a node (a missing program), not as `ip netns exec`'s exit 1.
   */
  run(command: Command): Promise<CommandResult> {
    if (!onHostPath(command.program)) return Promise.reject(missingProgramError(command));
    return this.#inner.run({
      ...command,
      program: "ip",
      args: ["netns", "exec", this.#namespace, command.program, ...command.args],
    });
  }
}

/** Where programs live when the environment is hidden (`deno test --ignore-env`). */
const STANDARD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/** Whether `program` is a file in one of the host's PATH directories (read each time: a test
 * may take a program away by changing PATH). */
export function onHostPath(program: string): boolean {
  if (program.includes("/")) return isFile(program);
  return (Deno.env.get("PATH") ?? STANDARD_PATH).split(":").some((dir) =>
    dir !== "" && isFile(`${dir}/${program}`)
  );
}

function isFile(path: string): boolean {
  try {
    return Deno.statSync(path).isFile;
  } catch {
    return false;
  }
}

/** Runs any program on the host with `Deno.Command`; only for test and demo setup. */
export class HostExecutor implements Executor {
  /** Runs one command; a missing program or a timeout throws {@linkcode CommandError}. */
  run(command: Command): Promise<CommandResult> {
    return spawnCommand(command);
  }
}

/** Why kernel tests or the real demo cannot run here, or undefined when they can. */
export async function kernelUnavailableReason(
  programs: readonly string[] = ["ip", "python3"],
): Promise<string | undefined> {
  if (Deno.build.os !== "linux") return `needs Linux, this is ${Deno.build.os}`;
  if (Deno.uid() !== 0) return "needs root to create network namespaces";
  for (const program of programs) {
    try {
      await new Deno.Command(program, { args: ["--version"], stdout: "null", stderr: "null" })
        .output();
    } catch {
      return `"${program}" is not installed`;
    }
  }
  return undefined;
}

/** A pod: a namespace with one IPv4 and one IPv6 address, running the echo server. */
export interface Pod {
  /** Short name, e.g. "pod-a1"; the echo server answers with it. */
  name: string;
  /** Namespace name. */
  ns: string;
  ipv4: string;
  ipv6: string;
  /** Node the pod runs on: "node-a" (the proxy's node) or "node-b". */
  nodeName: string;
  isLocal: boolean;
}

/** Options for {@linkcode Topology.create}. */
export interface TopologyOptions {
  /** Prefix of every namespace name, e.g. "kp-k-1a2b-". */
  prefix: string;
  /** Pods on the proxy's node. @default {3} */
  localPods?: number;
  /** Pods on the remote node; 0 leaves the remote node out. @default {1} */
  remotePods?: number;
  /** Ports every echo server listens on (TCP and UDP). @default {[8080]} */
  ports?: number[];
  /** Seconds after which echo servers exit on their own. @default {600} */
  serverLifetimeSeconds?: number;
  /** Delete everything and exit with status 130 on SIGINT (for tests; the demo has its own handler). @default {false} */
  exitOnSigint?: boolean;
}

/** The fixed addresses of a {@linkcode Topology}. */
export const ADDRESSES = Object.freeze({
  clientV4: "10.201.0.2",
  /** A second client address, e.g. outside a load balancer's source ranges. */
  clientV4Other: "10.201.0.3",
  clientV6: "fd00:201::2",
  clientV6Other: "fd00:201::3",
  nodeV4: "10.201.0.1",
  nodeV6: "fd00:201::1",
  /** The node's address on the link to the remote node. */
  nodeToRemoteV4: "10.202.0.1",
  nodeToRemoteV6: "fd00:202::1",
  remoteNodeV4: "10.202.0.2",
  remoteNodeV6: "fd00:202::2",
  /** Gateway address the node shows to each local pod. */
  podGatewayV4: "10.244.1.1",
  podGatewayV6: "fd00:244:1::1",
  remotePodGatewayV4: "10.244.2.1",
  remotePodGatewayV6: "fd00:244:2::1",
  clusterCIDRV4: "10.244.0.0/16",
  clusterCIDRV6: "fd00:244::/48",
  serviceCIDRV4: "10.96.0.0/16",
  serviceCIDRV6: "fd00:96::/112",
});

/** The result of one request made through {@linkcode Topology.requests}. */
export type Reply =
  | {
    ok: true;
    /** `<pod> <peer-ip> <port>`, as the echo server answered. */
    text: string;
    pod: string;
    peer: string;
    /** The pod port that answered. */
    port: number;
    elapsedMs: number;
  }
  | {
    ok: false;
    /** "refused": RST or ICMP reject; "timeout": dropped; "error": anything else. */
    error: "refused" | "timeout" | "error";
    detail: string;
    elapsedMs: number;
  };

/** One request made by the client program. */
export interface RequestSpec {
  protocol: "TCP" | "UDP";
  ip: string;
  port: number;
  /** @default {1500} */
  timeoutMs?: number;
  /** Local address to send from. */
  sourceIp?: string;
  /** Local port to send from (UDP flows that must keep their conntrack entry). */
  sourcePort?: number;
}

const ECHO_SERVER = `
import os, selectors, socket, sys, time
name = sys.argv[1]
ports = [int(p) for p in sys.argv[2].split(",")]
deadline = time.monotonic() + float(sys.argv[3])
sel = selectors.DefaultSelector()
def peer(address):
    host = address[0]
    return host[7:] if host.startswith("::ffff:") else host
for port in ports:
    for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
        s = socket.socket(socket.AF_INET6, kind)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        s.bind(("::", port))
        if kind == socket.SOCK_STREAM:
            s.listen(256)
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ, (kind, port))
sel.register(0, selectors.EVENT_READ, "stdin")
os.write(1, b"ready\\n")
while time.monotonic() < deadline:
    for key, _ in sel.select(1):
        if key.data == "stdin":
            if not os.read(0, 1024):
                sys.exit(0)
        elif key.data[0] == socket.SOCK_STREAM:
            try:
                conn, address = key.fileobj.accept()
                conn.setblocking(True)
                conn.settimeout(1)
                conn.sendall(("%s %s %d\\n" % (name, peer(address), key.data[1])).encode())
                conn.close()
            except OSError:
                pass
        else:
            try:
                data, address = key.fileobj.recvfrom(2048)
                key.fileobj.sendto(("%s %s %d\\n" % (name, peer(address), key.data[1])).encode(), address)
            except OSError:
                pass
`;

const CLIENT = `
import errno, json, socket, sys, time
results = []
for r in json.loads(sys.argv[1]):
    family = socket.AF_INET6 if ":" in r["ip"] else socket.AF_INET
    kind = socket.SOCK_STREAM if r["protocol"] == "TCP" else socket.SOCK_DGRAM
    timeout = r.get("timeoutMs", 1500) / 1000
    start = time.monotonic()
    s = socket.socket(family, kind)
    out = None
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if r.get("sourceIp") or r.get("sourcePort"):
            s.bind((r.get("sourceIp") or "", r.get("sourcePort") or 0))
        s.settimeout(timeout)
        s.connect((r["ip"], r["port"]))
        if kind == socket.SOCK_DGRAM:
            s.send(b"hello")
            data = s.recv(2048)
        else:
            data = b""
            while True:
                chunk = s.recv(2048)
                if not chunk:
                    break
                data += chunk
        out = {"ok": True, "text": data.decode().strip()}
    except socket.timeout:
        out = {"ok": False, "error": "timeout", "detail": "no answer in %gs" % timeout}
    except OSError as e:
        refused = e.errno in (errno.ECONNREFUSED, errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EACCES, errno.ECONNRESET, errno.EPERM)
        out = {"ok": False, "error": "refused" if refused else "error", "detail": errno.errorcode.get(e.errno, str(e))}
    finally:
        s.close()
    out["elapsedMs"] = round((time.monotonic() - start) * 1000, 1)
    results.append(out)
print(json.dumps(results))
`;

/** Runs `program` inside namespace `ns` (or on the host when `ns` is undefined), throwing on failure. */
async function exec(ns: string | undefined, program: string, args: string[]): Promise<string> {
  const executor = ns === undefined ? new HostExecutor() : new NetnsExecutor({ namespace: ns });
  const result = await runChecked(executor, { program, args, timeoutMs: 20_000 });
  return result.stdout;
}

/**
 * A set of namespaces wired as described in the module documentation. Create
 * it with {@linkcode Topology.create} and always {@linkcode Topology.destroy} it.
 */
export class Topology {
  /** Namespace of the external client. */
  readonly client: string;
  /** Namespace of the node running the proxy ("node-a"). */
  readonly node: string;
  /** Namespace of the remote node ("node-b"), undefined when it has no pods. */
  readonly remoteNode: string | undefined;
  /** Every pod, local ones first. */
  readonly pods: Pod[];
  readonly #namespaces: string[] = [];
  readonly #servers: Deno.ChildProcess[] = [];
  readonly #options: Required<TopologyOptions>;
  #destroyed = false;
  readonly #onUnload = () => this.#destroySync();
  readonly #onSigint = () => {
    this.#destroySync();
    Deno.exit(130);
  };

  private constructor(options: Required<TopologyOptions>) {
    this.#options = options;
    this.client = `${options.prefix}client`;
    this.node = `${options.prefix}node`;
    this.remoteNode = options.remotePods > 0 ? `${options.prefix}node-b` : undefined;
    this.pods = [];
    for (let i = 0; i < options.localPods; i++) {
      this.pods.push(podAt({ prefix: options.prefix, side: "a", index: i }));
    }
    for (let i = 0; i < options.remotePods; i++) {
      this.pods.push(podAt({ prefix: options.prefix, side: "b", index: i }));
    }
  }

  /** Builds the namespaces, links, routes and echo servers; cleans up if any step fails. */
  static async create(options: TopologyOptions): Promise<Topology> {
    const topology = new Topology({
      localPods: 3,
      remotePods: 1,
      ports: [8080],
      serverLifetimeSeconds: 600,
      exitOnSigint: false,
      ...options,
    });
    globalThis.addEventListener("unload", topology.#onUnload);
    if (topology.#options.exitOnSigint) Deno.addSignalListener("SIGINT", topology.#onSigint);
    try {
      await topology.#build();
    } catch (error) {
      await topology.destroy();
      throw error;
    }
    return topology;
  }

  /** A random 4-hex-digit tag for unique namespace prefixes. */
  static randomTag(): string {
    return crypto.getRandomValues(new Uint16Array(1))[0]!.toString(16).padStart(4, "0");
  }

  /** Local pods (on the proxy's node), in order. */
  get localPods(): Pod[] {
    return this.pods.filter((pod) => pod.isLocal);
  }

  /** Remote pods (on node-b), in order. */
  get remotePods(): Pod[] {
    return this.pods.filter((pod) => !pod.isLocal);
  }

  /** The pod with this short name; throws when there is none. */
  pod(name: string): Pod {
    const pod = this.pods.find((candidate) => candidate.name === name);
    if (!pod) throw new RangeError(`Cannot find pod "${name}"`);
    return pod;
  }

  /** Runs a program in one of this topology's namespaces and returns its stdout; throws on failure. */
  exec(ns: string, program: string, args: string[]): Promise<string> {
    return exec(ns, program, args);
  }

  /** Sends the requests one after another from namespace `fromNs`. */
  async requests(fromNs: string, requests: RequestSpec[]): Promise<Reply[]> {
    if (requests.length === 0) return [];
    const budget = requests.reduce((sum, r) => sum + (r.timeoutMs ?? 1500), 5_000);
    const result = await new NetnsExecutor({ namespace: fromNs }).run({
      program: "python3",
      args: ["-c", CLIENT, JSON.stringify(requests)],
      timeoutMs: budget,
    });
    if (result.code !== 0) {
      throw new Error(`Cannot run the client in ${fromNs}: ${result.stderr.trim()}`);
    }
    const raw = JSON.parse(result.stdout) as Array<
      { ok: boolean; text?: string; error?: string; detail?: string; elapsedMs: number }
    >;
    return raw.map((reply): Reply => {
      if (reply.ok) {
        const [pod = "", peer = "", port = ""] = (reply.text ?? "").split(" ");
        return {
          ok: true,
          text: reply.text ?? "",
          pod,
          peer,
          port: Number(port),
          elapsedMs: reply.elapsedMs,
        };
      }
      const error = reply.error === "refused" || reply.error === "timeout" ? reply.error : "error";
      return { ok: false, error, detail: reply.detail ?? "", elapsedMs: reply.elapsedMs };
    });
  }

  /** One TCP request from `fromNs`. */
  async tcpRequest(
    fromNs: string,
    ip: string,
    port: number,
    options: Omit<RequestSpec, "protocol" | "ip" | "port"> = {},
  ): Promise<Reply> {
    const [reply] = await this.requests(fromNs, [{ protocol: "TCP", ip, port, ...options }]);
    return reply!;
  }

  /** One UDP request from `fromNs`. */
  async udpRequest(
    fromNs: string,
    ip: string,
    port: number,
    options: Omit<RequestSpec, "protocol" | "ip" | "port"> = {},
  ): Promise<Reply> {
    const [reply] = await this.requests(fromNs, [{ protocol: "UDP", ip, port, ...options }]);
    return reply!;
  }

  /** Kills the echo servers and deletes every namespace; safe to call twice. */
  async destroy(): Promise<void> {
    if (this.#destroyed) return;
    this.#destroyed = true;
    globalThis.removeEventListener("unload", this.#onUnload);
    if (this.#options.exitOnSigint) Deno.removeSignalListener("SIGINT", this.#onSigint);
    for (const server of this.#servers) {
      await server.stdin.close().catch(() => undefined);
      try {
        server.kill("SIGKILL");
      } catch {
        // Already exited.
      }
      await server.status.catch(() => undefined);
    }
    for (const ns of [...this.#namespaces].reverse()) {
      await new Deno.Command("ip", { args: ["netns", "del", ns], stdout: "null", stderr: "null" })
        .output();
    }
  }

  #destroySync(): void {
    if (this.#destroyed) return;
    this.#destroyed = true;
    for (const server of this.#servers) {
      try {
        server.kill("SIGKILL");
      } catch {
        // Already exited.
      }
    }
    for (const ns of [...this.#namespaces].reverse()) {
      new Deno.Command("ip", { args: ["netns", "del", ns], stdout: "null", stderr: "null" })
        .outputSync();
    }
  }

  async #addNamespace(ns: string, options: { forwarding: boolean }): Promise<void> {
    await exec(undefined, "ip", ["netns", "add", ns]);
    this.#namespaces.push(ns);
    await exec(ns, "ip", ["link", "set", "lo", "up"]);
    const sysctls = [
      "net.ipv4.conf.all.rp_filter=0",
      "net.ipv4.conf.default.rp_filter=0",
      "net.ipv6.conf.all.accept_dad=0",
      "net.ipv6.conf.default.accept_dad=0",
    ];
    if (options.forwarding) {
      sysctls.push("net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1");
    }
    await exec(ns, "sysctl", ["-q", "-w", ...sysctls]);
  }

  /** Links `ns` (interface `localName`) to `peerNs` (interface `peerName`). */
  async #veth(
    link: { ns: string; localName: string; peerNs: string; peerName: string },
  ): Promise<void> {
    await exec(link.ns, "ip", [
      "link",
      "add",
      link.localName,
      "type",
      "veth",
      "peer",
      "name",
      link.peerName,
      "netns",
      link.peerNs,
    ]);
    await exec(link.ns, "ip", ["link", "set", link.localName, "up"]);
    await exec(link.peerNs, "ip", ["link", "set", link.peerName, "up"]);
  }

  async #addresses(
    ns: string,
    device: string,
    cidrs: string[],
    options: { secondary?: boolean } = {},
  ): Promise<void> {
    for (const cidr of cidrs) {
      const args = ["addr", "add", cidr, "dev", device];
      if (cidr.includes(":")) args.push("nodad");
      if (options.secondary && cidr.includes(":")) args.push("preferred_lft", "0");
      await exec(ns, "ip", args);
    }
  }

  async #route(ns: string, args: string[]): Promise<void> {
    const family = args.some((arg) => arg.includes(":")) ? "-6" : "-4";
    await exec(ns, "ip", [family, "route", "add", ...args]);
  }

  async #build(): Promise<void> {
    const a = ADDRESSES;
    await this.#addNamespace(this.client, { forwarding: false });
    await this.#addNamespace(this.node, { forwarding: true });
    await this.#veth({
      ns: this.node,
      localName: "to-client",
      peerNs: this.client,
      peerName: "eth0",
    });
    await this.#addresses(this.client, "eth0", [`${a.clientV4}/24`, `${a.clientV6}/64`]);
    // Deprecated (IPv6) or secondary (IPv4), so never picked as a default source.
    await this.#addresses(this.client, "eth0", [`${a.clientV4Other}/24`, `${a.clientV6Other}/64`], {
      secondary: true,
    });
    await this.#addresses(this.node, "to-client", [`${a.nodeV4}/24`, `${a.nodeV6}/64`]);
    await this.#route(this.client, ["default", "via", a.nodeV4]);
    await this.#route(this.client, ["default", "via", a.nodeV6]);
    // A default route, as a real node has, out of a dummy uplink: traffic to
    // addresses nobody serves leaves the node there and is lost.
    await this.#veth({
      ns: this.node,
      localName: "uplink",
      peerNs: this.node,
      peerName: "uplink-end",
    });
    await this.#addresses(this.node, "uplink", ["10.205.0.1/24", "fd00:205::1/64"]);
    for (const router of ["10.205.0.2", "fd00:205::2"]) {
      await exec(this.node, "ip", [
        "neigh",
        "add",
        router,
        "lladdr",
        "02:00:00:00:02:05",
        "dev",
        "uplink",
        "nud",
        "permanent",
      ]);
    }
    await this.#route(this.node, ["default", "via", "10.205.0.2"]);
    await this.#route(this.node, ["default", "via", "fd00:205::2"]);

    if (this.remoteNode !== undefined) {
      await this.#addNamespace(this.remoteNode, { forwarding: true });
      await this.#veth({
        ns: this.node,
        localName: "to-node-b",
        peerNs: this.remoteNode,
        peerName: "eth0",
      });
      await this.#addresses(this.node, "to-node-b", [
        `${a.nodeToRemoteV4}/24`,
        `${a.nodeToRemoteV6}/64`,
      ]);
      await this.#addresses(this.remoteNode, "eth0", [
        `${a.remoteNodeV4}/24`,
        `${a.remoteNodeV6}/64`,
      ]);
      await this.#route(this.node, ["10.244.2.0/24", "via", a.remoteNodeV4]);
      await this.#route(this.node, ["fd00:244:2::/64", "via", a.remoteNodeV6]);
      await this.#route(this.remoteNode, ["default", "via", a.nodeToRemoteV4]);
      await this.#route(this.remoteNode, ["default", "via", a.nodeToRemoteV6]);
    }

    for (const pod of this.pods) {
      const host = pod.isLocal ? this.node : this.remoteNode!;
      const gatewayV4 = pod.isLocal ? a.podGatewayV4 : a.remotePodGatewayV4;
      const gatewayV6 = pod.isLocal ? a.podGatewayV6 : a.remotePodGatewayV6;
      await this.#addNamespace(pod.ns, { forwarding: false });
      // Routed point-to-point links, as many CNI plugins do: no bridge, so traffic
      // between two pods of the node always crosses the node's netfilter hooks.
      const hostSide = `v-${pod.name}`;
      await this.#veth({ ns: host, localName: hostSide, peerNs: pod.ns, peerName: "eth0" });
      await this.#addresses(host, hostSide, [`${gatewayV4}/32`, `${gatewayV6}/128`]);
      await this.#route(host, [`${pod.ipv4}/32`, "dev", hostSide]);
      await this.#route(host, [`${pod.ipv6}/128`, "dev", hostSide]);
      await this.#addresses(pod.ns, "eth0", [`${pod.ipv4}/32`, `${pod.ipv6}/128`]);
      await this.#route(pod.ns, [gatewayV4, "dev", "eth0"]);
      await this.#route(pod.ns, ["default", "via", gatewayV4, "dev", "eth0"]);
      await this.#route(pod.ns, [gatewayV6, "dev", "eth0"]);
      await this.#route(pod.ns, ["default", "via", gatewayV6, "dev", "eth0"]);
    }
    await Promise.all(this.pods.map((pod) => this.#startServer(pod)));
  }

  async #startServer(pod: Pod): Promise<void> {
    const server = new Deno.Command("ip", {
      args: [
        "netns",
        "exec",
        pod.ns,
        "python3",
        "-c",
        ECHO_SERVER,
        pod.name,
        this.#options.ports.join(","),
        String(this.#options.serverLifetimeSeconds),
      ],
      stdin: "piped",
      stdout: "piped",
      stderr: "inherit",
    }).spawn();
    this.#servers.push(server);
    const reader = server.stdout.getReader();
    const { value } = await reader.read();
    reader.releaseLock();
    server.stdout.cancel().catch(() => undefined);
    if (!value || !new TextDecoder().decode(value).startsWith("ready")) {
      throw new Error(`Cannot start the echo server in ${pod.ns}`);
    }
  }
}

function podAt(options: { prefix: string; side: "a" | "b"; index: number }): Pod {
  const { prefix, side, index } = options;
  const name = `pod-${side}${index + 1}`;
  const subnet = side === "a" ? 1 : 2;
  return {
    name,
    ns: `${prefix}${name}`,
    ipv4: `10.244.${subnet}.${10 + index}`,
    ipv6: `fd00:244:${subnet}::${10 + index}`,
    nodeName: side === "a" ? "node-a" : "node-b",
    isLocal: side === "a",
  };
}
