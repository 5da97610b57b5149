/**
 * The per-Service-port traffic counters at scrape time: at most one kernel
 * read per `maxAgeMs` whoever asks (/metrics, /statusz), made in the
 * background so a scrape never waits for it (stale-while-revalidate), and the
 * exposition of `kproxy_service_connections_total` and
 * `kproxy_service_refused_packets_total`. A counter whose Service is gone is
 * not in the backend's reading, so its series disappears.
 *
 * @module
 */

import { getLogger } from "../core/logger.ts";
import type { Clock } from "../core/clock.ts";
import type { ServiceCounterSample } from "../core/service_counters.ts";

const logger = getLogger(["kproxy", "counters"]);

/** Options of {@linkcode ServiceCounterReader}. */
export interface ServiceCounterReaderOptions {
  /** One kernel read of every counter (`Backend.readServiceCounters`). */
  read: () => Promise<ServiceCounterSample[]>;
  clock: Pick<Clock, "now">;
  /** How long a reading is reused: about one scrape interval. @default {5000} */
  maxAgeMs?: number;
  /** How far back rates are computed. @default {60000} */
  windowMs?: number;
}

/** A service port's connection rate and refused packets over the window, for /statusz. */
export interface ServiceTraffic {
  /** `namespace/name:port/protocol ip_family`. */
  key: string;
  connectionsPerSecond: number;
  refusedPackets: number;
}

interface Reading {
  at: number;
  samples: ServiceCounterSample[];
}

/** Reads the counters at most once per `maxAgeMs` and keeps the readings of the last window. */
export class ServiceCounterReader {
  readonly #options: Required<ServiceCounterReaderOptions>;
  #readings: Reading[] = [];
  #pending?: Promise<ServiceCounterSample[]>;

  constructor(options: ServiceCounterReaderOptions) {
    this.#options = { maxAgeMs: 5_000, windowMs: 60_000, ...options };
  }

  /**
   * The samples to serve now: the last reading; when it is older than
   * `maxAgeMs`, a new kernel read starts in the background for the next
   * caller (a scrape never waits for the kernel, and sees counts at most one
   * interval old). Only the very first call waits for a read.
   */
  samples(): Promise<ServiceCounterSample[]> {
    const last = this.#readings.at(-1);
    if (last === undefined) return this.#refresh();
    if (this.#options.clock.now() - last.at >= this.#options.maxAgeMs) {
      this.#refresh().catch((error) => {
        logger.warn("Cannot read the service counters: {error}", { error });
      });
    }
    return Promise.resolve(last.samples);
  }

  /** Starts one kernel read, or joins the one in progress. */
  #refresh(): Promise<ServiceCounterSample[]> {
    this.#pending ??= this.#read().finally(() => (this.#pending = undefined));
    return this.#pending;
  }

  async #read(): Promise<ServiceCounterSample[]> {
    const samples = await this.#options.read();
    const at = this.#options.clock.now();
    this.#readings.push({ at, samples });
    const oldest = at - this.#options.windowMs;
    // Keep one reading at or before the window's start, to measure over the whole window.
    while (this.#readings.length > 2 && this.#readings[1]!.at <= oldest) this.#readings.shift();
    return samples;
  }

  /** Seconds between the oldest and the newest reading kept (0 with fewer than two). */
  windowSeconds(): number {
    const first = this.#readings[0];
    const last = this.#readings.at(-1);
    return first === undefined || last === undefined ? 0 : (last.at - first.at) / 1000;
  }

  /**
   * Connection rates and refused packets between the oldest and the newest
   * reading of the window, from readings already taken.
   */
  traffic(): ServiceTraffic[] {
    const first = this.#readings[0];
    const last = this.#readings.at(-1);
    if (first === undefined || last === undefined || last === first) return [];
    const seconds = (last.at - first.at) / 1000;
    const before = totals(first.samples);
    return [...totals(last.samples)].map(([key, now]) => {
      const then = before.get(key);
      // A counter re-created since the first reading starts from zero.
      const delta = (a: number, b = 0) => (a >= b ? a - b : a);
      return {
        key,
        connectionsPerSecond: delta(now.connections, then?.connections) / seconds,
        refusedPackets: delta(now.refused, then?.refused),
      };
    });
  }
}

function trafficKey(sample: ServiceCounterSample): string {
  const { namespace, name, protocol } = sample.service;
  return `${namespace}/${name}:${portLabel(sample)}/${protocol} ${sample.family}`;
}

function totals(
  samples: ServiceCounterSample[],
): Map<string, { connections: number; refused: number }> {
  const found = new Map<string, { connections: number; refused: number }>();
  for (const sample of samples) {
    const key = trafficKey(sample);
    let entry = found.get(key);
    if (entry === undefined) found.set(key, entry = { connections: 0, refused: 0 });
    if (sample.counter === "connections") entry.connections += sample.packets;
    else entry.refused += sample.packets;
  }
  return found;
}

/** The `port` label: the port's name, or its number when it has none. */
export function portLabel(sample: ServiceCounterSample): string {
  return sample.service.portName === "" ? String(sample.service.port) : sample.service.portName;
}

/** Where the two counter metrics read their samples: a reader, or fixed samples. */
export interface ServiceCounterSource {
  samples(): Promise<ServiceCounterSample[]>;
}

const CONNECTIONS_FAMILY = "kproxy_service_connections_total";
const REFUSED_FAMILY = "kproxy_service_refused_packets_total";
const CONNECTIONS_HELP = "Connections kproxy's rules sent to an endpoint of the Service port";
const REFUSED_HELP = "Packets to the Service port that kproxy's rules refused, by reason";

/** A label value as the text format writes it: `\\`, `\"` and `\n` escaped. */
function labelValue(value: string): string {
  return value.replaceAll("\\", "\\\\").replaceAll('"', '\\"').replaceAll("\n", "\\n");
}

/** One family's text: HELP, TYPE, then one line per label set (samples of the same set summed). */
function familyText(name: string, help: string, series: Map<string, number>): string {
  const lines = [`# HELP ${name} ${help}`, `# TYPE ${name} counter`];
  for (const [labels, value] of series) lines.push(`${name}{${labels}} ${value}`);
  return lines.join("\n");
}

/** Both families' exposition text for one reading. */
function renderCounters(samples: readonly ServiceCounterSample[]): string {
  const connections = new Map<string, number>();
  const refused = new Map<string, number>();
  for (const sample of samples) {
    const labels = `namespace="${labelValue(sample.service.namespace)}",service="${
      labelValue(sample.service.name)
    }",port="${labelValue(portLabel(sample))}",protocol="${
      labelValue(sample.service.protocol)
    }",ip_family="${sample.family}"`;
    const [series, key] = sample.counter === "connections"
      ? [connections, labels]
      : [refused, `${labels},reason="${labelValue(sample.counter)}"`];
    series.set(key, (series.get(key) ?? 0) + sample.packets);
  }
  return `${familyText(CONNECTIONS_FAMILY, CONNECTIONS_HELP, connections)}\n\n${
    familyText(REFUSED_FAMILY, REFUSED_HELP, refused)
  }\n`;
}

/**
 * The exposition text of `kproxy_service_connections_total` and
 * `kproxy_service_refused_packets_total` for each scrape, from `source`:
 * each shows exactly the service ports of the last reading (a deleted
 * Service's series are gone), and a reading is rendered once, however many
 * scrapes serve it (at 10k Services × 2 families of series, prom-client took
 * 150–250 ms a scrape on the thread that syncs). A failed read is logged and
 * shows no series.
 */
export function serviceCounterExposition(source: ServiceCounterSource): () => Promise<string> {
  let rendered: { samples: readonly ServiceCounterSample[]; text: string } | undefined;
  return async () => {
    const samples = await source.samples().catch((error) => {
      logger.warn("Cannot read the service counters: {error}", { error });
      return [];
    });
    if (rendered?.samples !== samples) rendered = { samples, text: renderCounters(samples) };
    return rendered.text;
  };
}

/** The Prometheus text of the two counter metrics for `samples` (tests, the bench). */
export function exposeServiceCounters(samples: ServiceCounterSample[]): Promise<string> {
  return serviceCounterExposition({ samples: () => Promise.resolve(samples) })();
}
