/**
 * The one event kproxy records, as kube-proxy does at start: `Starting` on
 * this node's Node, created through events.k8s.io/v1. Best effort: a failure
 * is logged at `-v=2` and never delays or fails the start.
 *
 * @module
 */

import { getLogger } from "../../core/logger.ts";
import { Backoff, type BackoffOptions, sleep } from "./backoff.ts";
import type { ApiConnection } from "./kubeconfig.ts";
import type { ApiTransport } from "./transport.ts";

const logger = getLogger(["kproxy", "source", "events"]);

/** The reporting controller kproxy names in its events (kube-proxy's is `kube-proxy`). */
export const REPORTING_CONTROLLER = "kproxy";

/** How often a refused or failed event is tried before giving up, as a bounded broadcaster. */
const ATTEMPTS = 5;

/** What {@linkcode startingEvent} describes. */
export interface StartingEventInput {
  /** The Node the event is about. */
  nodeName: string;
  /** This host's name, for `reportingInstance` (client-go: `<controller>-<hostname>`). */
  hostname: string;
  /** Wall time, milliseconds since the epoch. */
  wallNowMs: number;
}

/**
 * The events.k8s.io/v1 Event kube-proxy records at start
 * (`Eventf(nodeRef, nil, Normal, "Starting", "StartKubeProxy", "")`), named
 * and placed as client-go's recorder does: `<node>.<unix nanoseconds in hex>`
 * in namespace `default` (a Node has none). Pure.
 *
 * @example Usage
 * ```ts
 * import { startingEvent } from "./events.ts";
 * const event = startingEvent({ nodeName: "node-a", hostname: "node-a", wallNowMs: 0 });
 * console.assert(event.metadata.name === "node-a.0");
 * ```
 */
export function startingEvent(input: StartingEventInput): {
  apiVersion: "events.k8s.io/v1";
  kind: "Event";
  metadata: { name: string; namespace: string };
  [field: string]: unknown;
} {
  const nanos = BigInt(Math.trunc(input.wallNowMs)) * 1_000_000n;
  return {
    apiVersion: "events.k8s.io/v1",
    kind: "Event",
    metadata: { name: `${input.nodeName}.${nanos.toString(16)}`, namespace: "default" },
    eventTime: microTime(input.wallNowMs),
    reportingController: REPORTING_CONTROLLER,
    reportingInstance: `${REPORTING_CONTROLLER}-${input.hostname}`,
    action: "StartKubeProxy",
    reason: "Starting",
    regarding: { apiVersion: "v1", kind: "Node", name: input.nodeName },
    note: "",
    type: "Normal",
  };
}

/** Go's `metav1.MicroTime` in JSON: RFC 3339 in UTC with six fractional digits. */
function microTime(ms: number): string {
  return new Date(ms).toISOString().replace(/\.(\d{3})Z$/, ".$1000Z");
}

/** Options for {@linkcode recordStartingEvent}. */
export interface RecordStartingOptions {
  connection: ApiConnection;
  transport: ApiTransport;
  nodeName: string;
  signal: AbortSignal;
  /** @default {Deno.hostname(), else the node name} */
  hostname?: string;
  /** Delays between attempts. @default {{ initialMs: 1000, maxMs: 30000 }} */
  backoff?: BackoffOptions;
  /** @default {Date.now} */
  wallNow?: () => number;
}

/**
 * Creates the Starting event, trying a few times; resolves when it is
 * created, given up or the signal aborted. Never rejects.
 */
export async function recordStartingEvent(options: RecordStartingOptions): Promise<void> {
  const { connection, transport, nodeName, signal } = options;
  const event = startingEvent({
    nodeName,
    hostname: options.hostname ?? hostnameOr(nodeName),
    wallNowMs: (options.wallNow ?? Date.now)(),
  });
  const url = `${connection.server}/apis/events.k8s.io/v1/namespaces/` +
    `${event.metadata.namespace}/events`;
  const backoff = new Backoff(options.backoff ?? { initialMs: 1000, maxMs: 30_000 });
  let failure = "";
  for (let attempt = 1; attempt <= ATTEMPTS && !signal.aborted; attempt++) {
    try {
      const credentials = await connection.credentials();
      const response = await transport.send({
        url,
        method: "POST",
        body: JSON.stringify(event),
        headers: {
          Accept: "application/json",
          "Content-Type": "application/json",
          ...credentials.headers,
        },
        signal,
        tls: { ca: credentials.ca, cert: credentials.cert, key: credentials.key },
      });
      const text = await response.text();
      if (response.status === 201 || response.status === 200) return;
      failure = `HTTP ${response.status}${statusMessage(text)}`;
      // A refusal (403, 422) is an answer; only failures worth retrying are retried.
      if (response.status < 500 && response.status !== 429) break;
    } catch (error) {
      if (signal.aborted) return;
      failure = error instanceof Error ? error.message : String(error);
    }
    if (attempt < ATTEMPTS) await sleep(backoff.next(), signal);
  }
  if (signal.aborted) return;
  logger.info("Cannot record the Starting event on node {node}: {error}", {
    node: nodeName,
    error: failure,
  });
}

function statusMessage(text: string): string {
  try {
    const message = JSON.parse(text)?.message;
    return typeof message === "string" && message !== "" ? `: ${message}` : "";
  } catch {
    return "";
  }
}

function hostnameOr(fallback: string): string {
  try {
    return Deno.hostname();
  } catch {
    return fallback;
  }
}
