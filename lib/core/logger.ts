/**
 * Structured logging by category: code asks for a {@linkcode Logger} once
 * (`getLogger(["kproxy", "runner"])`) and writes records with a message
 * template and properties; where the records go is configured once, by the
 * shell (`lib/shell/log.ts`), or by a test that collects them.
 *
 * A message's `{name}` placeholders are filled from the properties of the
 * same name. A record goes to the route whose category is the longest prefix
 * of its own, when its level is at least that route's lowest level; a record
 * with no route is dropped.
 *
 * This is the part of LogTape kproxy used, kept to its record shape: the
 * package's Node build, which Deno picks, imports `node:util`, and that
 * import alone starts Deno's Node compatibility layer in every kproxy
 * process (docs/BENCHMARKS.md, findings).
 *
 * @module
 */

/** Severities, lowest first. */
export type LogLevel = "trace" | "debug" | "info" | "warning" | "error" | "fatal";

const LEVEL_RANK: Readonly<Record<LogLevel, number>> = {
  trace: 0,
  debug: 1,
  info: 2,
  warning: 3,
  error: 4,
  fatal: 5,
};

/** One log record. */
export interface LogRecord {
  readonly category: readonly string[];
  readonly level: LogLevel;
  /** Milliseconds since the epoch. */
  readonly timestamp: number;
  /** The template's text parts at even indices, the substituted values at odd ones. */
  readonly message: readonly unknown[];
  /** The message template as written. */
  readonly rawMessage: string;
  readonly properties: Readonly<Record<string, unknown>>;
}

/** Receives the records routed to it. */
export type Sink = (record: LogRecord) => void;

/** Where the records of a category (and of the categories below it) go. */
export interface LogRoute {
  category: readonly string[];
  sink: Sink;
  lowestLevel: LogLevel;
}

/** Writes records of one category. */
export interface Logger {
  readonly category: readonly string[];
  trace(message: string, properties?: Record<string, unknown>): void;
  debug(message: string, properties?: Record<string, unknown>): void;
  info(message: string, properties?: Record<string, unknown>): void;
  warn(message: string, properties?: Record<string, unknown>): void;
  warning(message: string, properties?: Record<string, unknown>): void;
  error(message: string, properties?: Record<string, unknown>): void;
  fatal(message: string, properties?: Record<string, unknown>): void;
}

let routes: readonly LogRoute[] = [];

/** Replaces every route: records go where `next` says from now on. */
export function configureLogging(next: readonly LogRoute[]): void {
  routes = [...next].sort((a, b) => b.category.length - a.category.length);
}

/** Drops every route: records go nowhere. */
export function resetLogging(): void {
  routes = [];
}

function isPrefix(prefix: readonly string[], category: readonly string[]): boolean {
  return prefix.length <= category.length && prefix.every((part, i) => part === category[i]);
}

/** Splits a template at its `{name}` placeholders, filled from `properties`. */
function renderMessage(template: string, properties: Record<string, unknown>): unknown[] {
  const parts: unknown[] = [];
  let last = 0;
  for (const match of template.matchAll(/\{([^{}]+)\}/g)) {
    parts.push(template.slice(last, match.index), properties[match[1]!.trim()]);
    last = match.index + match[0].length;
  }
  parts.push(template.slice(last));
  return parts;
}

function emit(
  category: readonly string[],
  level: LogLevel,
  rawMessage: string,
  properties: Record<string, unknown> = {},
): void {
  const route = routes.find((candidate) => isPrefix(candidate.category, category));
  if (route === undefined || LEVEL_RANK[level] < LEVEL_RANK[route.lowestLevel]) return;
  try {
    route.sink({
      category,
      level,
      timestamp: Date.now(),
      message: renderMessage(rawMessage, properties),
      rawMessage,
      properties,
    });
  } catch {
    // A sink that cannot write (a closed stderr) must not stop what was logging.
  }
}

/** The logger of `category` (a name or a path of names). */
export function getLogger(category: string | readonly string[]): Logger {
  const path = typeof category === "string" ? [category] : [...category];
  const at = (level: LogLevel) => (message: string, properties?: Record<string, unknown>) =>
    emit(path, level, message, properties);
  return {
    category: path,
    trace: at("trace"),
    debug: at("debug"),
    info: at("info"),
    warn: at("warning"),
    warning: at("warning"),
    error: at("error"),
    fatal: at("fatal"),
  };
}
