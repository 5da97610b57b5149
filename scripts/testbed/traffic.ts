/**
 * Traffic through the topology while kproxy works: which pods answer, a
 * steady loop of new connections, HTTP probes and a connection flood.
 *
 * @module
 */

import assert from "node:assert/strict";
import { NetnsExecutor, type Pod, type Reply, type Topology } from "../netns.ts";

/** Sends `count` TCP requests from the client to `ip:port`; returns the pods that answered. */
export async function answeringPods(
  topology: Topology,
  ip: string,
  port: number,
  count = 4,
): Promise<{ pods: string[]; failures: Reply[] }> {
  const replies = await topology.requests(
    topology.client,
    Array.from({ length: count }, () => ({ protocol: "TCP" as const, ip, port, timeoutMs: 1000 })),
  );
  return {
    pods: [...new Set(replies.flatMap((r) => r.ok ? [r.pod] : []))].sort(),
    failures: replies.filter((r) => !r.ok),
  };
}

/** Asserts every request to `ip:port` is answered, each by one of `pods`. */
export async function assertServedBy(
  topology: Topology,
  ip: string,
  port: number,
  pods: Pod[] | string[],
  count = 4,
): Promise<void> {
  const allowed = pods.map((pod) => typeof pod === "string" ? pod : pod.name);
  const { pods: answered, failures } = await answeringPods(topology, ip, port, count);
  assert.deepEqual(failures, [], `requests to ${ip}:${port} failed`);
  for (const pod of answered) {
    assert.ok(allowed.includes(pod), `${ip}:${port} answered by ${pod}, not ${allowed}`);
  }
}

/** Options for {@linkcode TrafficLoop.start}. */
export interface TrafficLoopOptions {
  topology: Topology;
  /** `ip:port` targets, each sent one TCP request per round. */
  targets: { ip: string; port: number }[];
  /** Pause between rounds. @default {100} */
  pauseMs?: number;
}

/** TCP requests from the client namespace in a loop until stopped; records every failure. */
export class TrafficLoop {
  /** Requests sent. */
  sent = 0;
  /** Failed requests with their target and time. */
  readonly failures: { target: string; reply: Reply; at: number }[] = [];
  /** Rounds whose client could not run to the end (killed on a starved machine): no replies. */
  clientErrors = 0;
  readonly #done: Promise<void>;
  #stopped = false;

  private constructor(options: TrafficLoopOptions) {
    this.#done = this.#loop(options);
  }

  /** Starts the loop. */
  static start(options: TrafficLoopOptions): TrafficLoop {
    return new TrafficLoop(options);
  }

  /** Stops after the current round; resolves when it has. */
  async stop(): Promise<void> {
    this.#stopped = true;
    await this.#done;
  }

  async #loop(options: TrafficLoopOptions): Promise<void> {
    const { topology, targets } = options;
    while (!this.#stopped) {
      let replies: Reply[];
      try {
        replies = await topology.requests(
          topology.client,
          targets.map(({ ip, port }) => ({ protocol: "TCP" as const, ip, port, timeoutMs: 1000 })),
        );
      } catch {
        // The client itself failed, not a request through the rules; a loop that threw here
        // would leave an unhandled rejection behind until stop().
        this.clientErrors++;
        replies = [];
      }
      replies.forEach((reply, i) => {
        this.sent++;
        if (!reply.ok) {
          const { ip, port } = targets[i]!;
          this.failures.push({ target: `${ip}:${port}`, reply, at: Date.now() });
        }
      });
      await new Promise((resolve) => setTimeout(resolve, options.pauseMs ?? 100));
    }
  }
}

/** Options for {@linkcode httpStatus}. */
export interface HttpStatusOptions {
  /** curl's `--max-time`: the whole request, connection included. @default {2} */
  maxTimeSeconds?: number;
}

/** The HTTP status of GET `url` from namespace `ns` (with curl), 0 when no answer came in time. */
export async function httpStatus(
  ns: string,
  url: string,
  options: HttpStatusOptions = {},
): Promise<number> {
  const maxTime = options.maxTimeSeconds ?? 2;
  const result = await new NetnsExecutor({ namespace: ns }).run({
    program: "curl",
    args: ["-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", String(maxTime), url],
    timeoutMs: maxTime * 1000 + 3_000,
  });
  return Number(result.stdout.trim() || "0");
}

const FLOOD = `
import json, os, select, socket, sys, time
host, port, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
kinds, reopen_per_second = sys.argv[4].split(","), int(sys.argv[5])
requests = {
    "idle": b"",
    "half": b"GET /healthz HTTP/1.1\\r\\nHost: kproxy\\r\\nX-Slow: ",
    "keepalive": b"GET /healthz HTTP/1.1\\r\\nHost: kproxy\\r\\n\\r\\n",
}
stats = {"opened": 0, "connectFailures": 0, "closedByServer": 0, "answered": 0, "mostOpen": 0}
sockets = {}
def open_one(slot):
    kind = kinds[slot % len(kinds)]
    s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    s.settimeout(1)
    try:
        s.connect((host, port))
        if requests[kind]:
            s.sendall(requests[kind])
        s.setblocking(False)
    except OSError:
        stats["connectFailures"] += 1
        s.close()
        return
    stats["opened"] += 1
    sockets[slot] = s
def poll():
    for slot, s in list(sockets.items()):
        try:
            data = s.recv(65536)
        except BlockingIOError:
            continue
        except OSError:
            data = b""
        if data:
            stats["answered"] += 1
            continue
        stats["closedByServer"] += 1
        s.close()
        del sockets[slot]
for slot in range(count):
    open_one(slot)
stats["mostOpen"] = len(sockets)
os.write(1, b"ready\\n")
while not select.select([0], [], [], 0.2)[0]:
    poll()
    budget = max(1, reopen_per_second // 5)
    for slot in range(count):
        if budget == 0:
            break
        if slot not in sockets:
            open_one(slot)
            budget -= 1
    stats["mostOpen"] = max(stats["mostOpen"], len(sockets))
poll()
os.write(1, (json.dumps(stats) + "\\n").encode())
`;

/** Options for {@linkcode ConnectionFlood.start}. */
export interface ConnectionFloodOptions {
  /** Namespace the connections come from. */
  namespace: string;
  host: string;
  port: number;
  /** Connections held open at once (closed ones are opened again). */
  connections: number;
  /**
   * What each connection sends, in turn: nothing, half a request header, or a
   * whole keep-alive request whose answer it reads and then keeps quiet.
   * @default {["idle", "half", "keepalive"]}
   */
  kinds?: ("idle" | "half" | "keepalive")[];
  /** How fast closed connections are opened again. @default {200} */
  reopenPerSecond?: number;
}

/** What a {@linkcode ConnectionFlood} saw. */
export interface ConnectionFloodStats {
  opened: number;
  connectFailures: number;
  closedByServer: number;
  /** Reads that returned data (answers to keep-alive requests, error pages). */
  answered: number;
  /** The most connections it held open at once. */
  mostOpen: number;
}

/**
 * A client that opens many TCP connections from a namespace and holds them
 * open without finishing a request (a python3 program, so it is not bound by
 * the test's event loop).
 */
export class ConnectionFlood {
  readonly #child: Deno.ChildProcess;
  readonly #lines: ReadableStreamDefaultReader<string>;
  #buffer = "";
  /** Resolves once every connection was tried once. */
  readonly ready: Promise<void>;

  private constructor(options: ConnectionFloodOptions) {
    this.#child = new Deno.Command("ip", {
      args: [
        "netns",
        "exec",
        options.namespace,
        "python3",
        "-c",
        FLOOD,
        options.host,
        String(options.port),
        String(options.connections),
        (options.kinds ?? ["idle", "half", "keepalive"]).join(","),
        String(options.reopenPerSecond ?? 200),
      ],
      stdin: "piped",
      stdout: "piped",
      stderr: "inherit",
    }).spawn();
    this.#lines = this.#child.stdout.pipeThrough(new TextDecoderStream()).getReader();
    this.ready = this.#line().then((line) => {
      if (line.trim() !== "ready") throw new Error(`Cannot start the connection flood: ${line}`);
    });
  }

  /** Starts the flood; await {@linkcode ready} before relying on it. */
  static start(options: ConnectionFloodOptions): ConnectionFlood {
    return new ConnectionFlood(options);
  }

  /** Closes every connection and returns what the flood saw. */
  async stop(): Promise<ConnectionFloodStats> {
    await this.#child.stdin.close();
    const stats = JSON.parse(await this.#line()) as ConnectionFloodStats;
    await this.#child.status;
    return stats;
  }

  /** Kills the flood if it still runs (for `finally` blocks). */
  async kill(): Promise<void> {
    try {
      this.#child.kill("SIGKILL");
    } catch {
      // Already exited.
    }
    await this.#child.status;
    await this.#lines.cancel().catch(() => undefined);
  }

  async #line(): Promise<string> {
    while (!this.#buffer.includes("\n")) {
      const { value, done } = await this.#lines.read();
      if (done) throw new Error(`The connection flood ended early: ${this.#buffer}`);
      this.#buffer += value;
    }
    const end = this.#buffer.indexOf("\n");
    const line = this.#buffer.slice(0, end);
    this.#buffer = this.#buffer.slice(end + 1);
    return line;
  }
}
