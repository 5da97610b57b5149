/**
 * Logging setup for kproxy: one klog-like, greppable line per record on
 * stderr, filtered by kube-proxy's `-v` verbosity.
 *
 * ```
 * I1123 09:30:00.123456 runner] "Synced rules" mode=nftables durationMs=12
 * ```
 *
 * @module
 */

import { configureLogging, type LogLevel, type LogRecord, type Sink } from "../core/logger.ts";

/** Options for {@linkcode setupLogging}. */
export interface LoggingOptions {
  /** kube-proxy's `-v`: 0 is quiet, 1–2 info, 3–4 debug, 5 and up trace. */
  verbosity: number;
  /** Receives each formatted line, without a newline. @default writes the line to stderr */
  sink?: (line: string) => void;
}

const LEVEL_LETTERS: Readonly<Record<LogLevel, string>> = {
  trace: "T",
  debug: "D",
  info: "I",
  warning: "W",
  error: "E",
  fatal: "F",
};

/** The category whose info records show even at verbosity 0 (startup, shutdown). */
const MAIN_CATEGORY = ["kproxy", "main"];

/**
 * The lowest level shown at a verbosity, mirroring kube-proxy's `-v`
 * (0 → warning, 1–2 → info, 3–4 → debug, 5+ → trace).
 *
 * @param verbosity An integer, 0 or more.
 * @returns The lowest level logged for every category.
 */
export function lowestLevelFor(verbosity: number): LogLevel {
  if (verbosity >= 5) return "trace";
  if (verbosity >= 3) return "debug";
  if (verbosity >= 1) return "info";
  return "warning";
}

/**
 * Routes kproxy's log records (`lib/core/logger.ts`) to klog-like lines,
 * replacing any earlier routes.
 *
 * @param options Verbosity and, for tests, where lines go.
 * @returns A promise rejected with a RangeError when the verbosity is not an
 * integer of 0 or more.
 * @example Usage
 * ```ts
 * import { setupLogging } from "./log.ts";
 * await setupLogging({ verbosity: 2 });
 * ```
 */
export function setupLogging(options: LoggingOptions): Promise<void> {
  const { verbosity } = options;
  if (!Number.isInteger(verbosity) || verbosity < 0) {
    return Promise.reject(
      new RangeError(`Cannot set up logging: verbosity ${verbosity} is not 0 or more`),
    );
  }
  const write = options.sink ?? writeStderr;
  const sink: Sink = (record) => write(formatRecord(record));
  const lowestLevel = lowestLevelFor(verbosity);
  configureLogging([
    { category: [], sink, lowestLevel },
    ...(lowestLevel === "warning"
      ? [{ category: MAIN_CATEGORY, sink, lowestLevel: "info" as const }]
      : []),
  ]);
  return Promise.resolve();
}

const encoder = new TextEncoder();

function writeStderr(line: string): void {
  const bytes = encoder.encode(line + "\n");
  let written = 0;
  while (written < bytes.length) written += Deno.stderr.writeSync(bytes.subarray(written));
}

/**
 * Formats one record as a klog-like line: level letter, UTC `MMDD hh:mm:ss.uuuuuu`,
 * the category's last part, the quoted message, then `key=value` for each
 * property the message does not already show. Pure.
 *
 * @param record A log record.
 * @returns One line, without a newline.
 * @example Usage
 * ```ts
 * import { formatRecord } from "./log.ts";
 * formatRecord({
 *   category: ["kproxy", "runner"], level: "info", timestamp: 0,
 *   message: ["Synced rules"], rawMessage: "Synced rules", properties: { mode: "nftables" },
 * }); // 'I0101 00:00:00.000000 runner] "Synced rules" mode=nftables'
 * ```
 */
export function formatRecord(record: LogRecord): string {
  const letter = LEVEL_LETTERS[record.level] ?? "I";
  const where = record.category.at(-1) ?? "root";
  const message = record.message
    .map((part, i) => i % 2 === 0 ? String(part) : renderInline(part))
    .join("");
  const shown = placeholders(record.rawMessage);
  const pairs = Object.entries(record.properties)
    .filter(([key]) => !shown.has(key))
    .map(([key, value]) => `${key}=${formatValue(value)}`);
  const head = `${letter}${formatTimestamp(record.timestamp)} ${where}] ${JSON.stringify(message)}`;
  return pairs.length === 0 ? head : `${head} ${pairs.join(" ")}`;
}

function formatTimestamp(ms: number): string {
  const date = new Date(ms);
  const pad = (value: number, width = 2) => String(value).padStart(width, "0");
  const micros = Math.floor((ms - Math.floor(ms / 1000) * 1000) * 1000);
  return `${pad(date.getUTCMonth() + 1)}${pad(date.getUTCDate())} ` +
    `${pad(date.getUTCHours())}:${pad(date.getUTCMinutes())}:${pad(date.getUTCSeconds())}.` +
    pad(micros, 6);
}

/** Names of `{placeholders}` in a message template. */
function placeholders(rawMessage: string): Set<string> {
  return new Set(
    [...rawMessage.matchAll(/\{([^{}]+)\}/g)].map((match) => match[1]!.trim()),
  );
}

function renderInline(value: unknown): string {
  if (typeof value === "string") return value;
  if (value instanceof Error) return value.message;
  return formatValue(value);
}

/** A property value: bare when it is one safe word, else quoted like Go's %q. */
function formatValue(value: unknown): string {
  if (value instanceof Error) return JSON.stringify(value.message);
  if (typeof value === "string") {
    return /^[^\s"=\\]+$/.test(value) ? value : JSON.stringify(value);
  }
  if (typeof value === "number" || typeof value === "boolean" || typeof value === "bigint") {
    return String(value);
  }
  if (value === null || value === undefined) return String(value);
  if (value instanceof Date) return value.toISOString();
  let text: string;
  try {
    text = JSON.stringify(value) ?? String(value);
  } catch {
    text = String(value);
  }
  return /\s/.test(text) ? JSON.stringify(text) : text;
}
