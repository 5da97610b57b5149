/**
 * The read-only status page served at `/statusz` on the metrics address: the
 * proxy's mode, version, node, uptime, what it programs (per IP family), a
 * chart and a table of its last syncs, the last failure and drift repairs.
 *
 * HTML for people (self-contained: inline CSS and SVG, no script, no external
 * asset), JSON for tools. Everything shown is escaped, since service names
 * and error messages come from the cluster.
 *
 * @module
 */

import type { NodePlans, Plan } from "../core/plan.ts";

/** One sync, as recorded by {@linkcode SyncHistory}. */
export interface SyncRecord {
  /** Start time, ms since the epoch. */
  at: number;
  full: boolean;
  durationMs: number;
  /** Service ports changed (for a failure: that the sync tried to change). */
  changed: number;
  ok: boolean;
  /** The failure's message; only when `ok` is false. */
  error?: string;
}

/** Options for {@linkcode SyncHistory}. */
export interface SyncHistoryOptions {
  /** How many syncs to keep. @default {50} */
  capacity?: number;
}

/**
 * A ring buffer of the last syncs, fed by the shell after each sync.
 *
 * @example Usage
 * ```ts
 * import { SyncHistory } from "./status.ts";
 * const history = new SyncHistory({ capacity: 3 });
 * history.record({ at: 0, full: true, durationMs: 12, changed: 4, ok: true });
 * history.entries().length; // 1
 * ```
 */
export class SyncHistory {
  readonly #capacity: number;
  readonly #ring: SyncRecord[] = [];
  #next = 0;
  #total = 0;
  #failures = 0;
  #lastFailure?: SyncRecord;

  /** Creates an empty history. */
  constructor(options: SyncHistoryOptions = {}) {
    const capacity = options.capacity ?? 50;
    if (!Number.isInteger(capacity) || capacity < 1) {
      throw new RangeError(`Cannot create a sync history of capacity ${capacity}: want >= 1`);
    }
    this.#capacity = capacity;
  }

  /** Records one sync, forgetting the oldest when full. */
  record(sync: SyncRecord): void {
    const entry = { ...sync };
    if (this.#ring.length < this.#capacity) this.#ring.push(entry);
    else this.#ring[this.#next] = entry;
    this.#next = (this.#next + 1) % this.#capacity;
    this.#total++;
    if (!sync.ok) {
      this.#failures++;
      this.#lastFailure = entry;
    }
  }

  /** The kept syncs, oldest first. */
  entries(): SyncRecord[] {
    if (this.#ring.length < this.#capacity) return this.#ring.map((e) => ({ ...e }));
    return [...this.#ring.slice(this.#next), ...this.#ring.slice(0, this.#next)].map((e) => ({
      ...e,
    }));
  }

  /** Syncs recorded since creation, including forgotten ones. */
  get total(): number {
    return this.#total;
  }

  /** Failed syncs recorded since creation. */
  get failures(): number {
    return this.#failures;
  }

  /** The last failed sync, even when it left the ring. */
  get lastFailure(): SyncRecord | undefined {
    return this.#lastFailure === undefined ? undefined : { ...this.#lastFailure };
  }
}

/** What one IP family of the node programs. */
export interface FamilyCounts {
  /** Distinct services. */
  services: number;
  servicePorts: number;
  /** Distinct `ip:port` endpoints in use (internal or external traffic). */
  endpoints: number;
  /** Of `endpoints`, those on this node. */
  localEndpoints: number;
  /** Service ports with no eligible endpoint for cluster IP traffic. */
  withoutEndpoints: number;
  /** The first {@linkcode MAX_LISTED_IDS} of their ids. */
  withoutEndpointsIds: string[];
}

/** How many ids of service ports without endpoints a snapshot lists per family. */
export const MAX_LISTED_IDS = 20;

/** Everything the status page shows; built by the shell on each request. */
export interface StatusSnapshot {
  version: string;
  mode: string;
  node: string;
  /** ms since the epoch. */
  startedAt: number;
  /** ms since the epoch, when the snapshot was taken. */
  now: number;
  /** Time since start, from the monotonic clock (wall time can step). */
  uptimeMs: number;
  healthy: boolean;
  /** Per family; undefined before the first successful sync. */
  families?: { ipv4: FamilyCounts; ipv6: FamilyCounts };
  /** The last syncs, oldest first (see {@linkcode SyncHistory.entries}). */
  syncs: SyncRecord[];
  totalSyncs: number;
  failedSyncs: number;
  lastFailure?: SyncRecord;
  /** Full resyncs forced because the kernel's rules drifted. */
  driftRepairs: number;
}

/**
 * Counts what a family's plan programs.
 *
 * @param plan The plan of one family.
 * @returns The counts.
 */
export function countPlan(plan: Plan): FamilyCounts {
  const services = new Set<string>();
  const endpoints = new Set<string>();
  const local = new Set<string>();
  let withoutEndpoints = 0;
  const withoutEndpointsIds: string[] = [];
  for (const sp of plan.services) {
    services.add(`${sp.namespace}/${sp.name}`);
    for (const ep of [...sp.internal.endpoints, ...sp.external.endpoints]) {
      const key = `${ep.ip}|${ep.port}`;
      endpoints.add(key);
      if (ep.isLocal) local.add(key);
    }
    if (sp.internal.endpoints.length === 0) {
      withoutEndpoints++;
      if (withoutEndpointsIds.length < MAX_LISTED_IDS) withoutEndpointsIds.push(sp.id);
    }
  }
  return {
    services: services.size,
    servicePorts: plan.services.length,
    endpoints: endpoints.size,
    localEndpoints: local.size,
    withoutEndpoints,
    withoutEndpointsIds,
  };
}

/**
 * Counts both families of the last applied plans.
 *
 * @param plans The plans, or undefined before the first sync.
 * @returns The counts, or undefined.
 */
export function countPlans(
  plans: NodePlans | undefined,
): { ipv4: FamilyCounts; ipv6: FamilyCounts } | undefined {
  return plans === undefined
    ? undefined
    : { ipv4: countPlan(plans.ipv4), ipv6: countPlan(plans.ipv6) };
}

/**
 * Builds the `/statusz` handler. GET and HEAD only; JSON when the request
 * asks for it (`?format=json` or an `Accept` header preferring
 * `application/json`), HTML otherwise.
 *
 * @example Usage
 * ```ts ignore
 * const handler = statusHandler(() => snapshot());
 * Deno.serve((req) => new URL(req.url).pathname === "/statusz" ? handler(req) : notFound());
 * ```
 *
 * @param source Called once per request for a fresh snapshot.
 * @returns The request handler.
 */
export function statusHandler(source: () => StatusSnapshot): (req: Request) => Response {
  return (req) => {
    if (req.method !== "GET" && req.method !== "HEAD") {
      return new Response("405 method not allowed\n", {
        status: 405,
        headers: { allow: "GET, HEAD", "content-type": "text/plain; charset=utf-8" },
      });
    }
    const snapshot = source();
    const headers: Record<string, string> = {
      "cache-control": "no-store",
      "x-content-type-options": "nosniff",
    };
    if (wantsJson(req)) {
      headers["content-type"] = "application/json; charset=utf-8";
      return new Response(
        req.method === "HEAD" ? null : JSON.stringify(statusJson(snapshot), null, 2) + "\n",
        { headers },
      );
    }
    headers["content-type"] = "text/html; charset=utf-8";
    headers["content-security-policy"] =
      "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'none'; frame-ancestors 'none'";
    return new Response(req.method === "HEAD" ? null : renderStatusHtml(snapshot), { headers });
  };
}

function wantsJson(req: Request): boolean {
  const format = new URL(req.url).searchParams.get("format");
  if (format !== null) return format.toLowerCase() === "json";
  const accept = req.headers.get("accept") ?? "";
  const json = accept.indexOf("application/json");
  if (json < 0) return false;
  const html = accept.indexOf("text/html");
  return html < 0 || json < html;
}

/** The JSON form of a snapshot: times as ISO strings, plus uptime. */
export function statusJson(s: StatusSnapshot): Record<string, unknown> {
  return {
    version: s.version,
    mode: s.mode,
    node: s.node,
    healthy: s.healthy,
    startedAt: iso(s.startedAt),
    now: iso(s.now),
    uptimeSeconds: Math.max(0, Math.floor(s.uptimeMs / 1000)),
    families: s.families ?? null,
    totalSyncs: s.totalSyncs,
    failedSyncs: s.failedSyncs,
    driftRepairs: s.driftRepairs,
    lastFailure: s.lastFailure === undefined ? null : syncJson(s.lastFailure),
    syncs: s.syncs.map(syncJson),
  };
}

function syncJson(sync: SyncRecord): Record<string, unknown> {
  return {
    at: iso(sync.at),
    full: sync.full,
    durationMs: sync.durationMs,
    changed: sync.changed,
    ok: sync.ok,
    ...(sync.error === undefined ? {} : { error: sync.error }),
  };
}

function iso(ms: number): string {
  return Number.isFinite(ms) ? new Date(ms).toISOString() : "";
}

// ---------------------------------------------------------------------------
// HTML.

const HTML_ESCAPES: Readonly<Record<string, string>> = {
  "&": "&amp;",
  "<": "&lt;",
  ">": "&gt;",
  '"': "&quot;",
  "'": "&#39;",
};

/**
 * Escapes text for HTML element content and quoted attribute values.
 *
 * @param text Any text.
 * @returns The escaped text.
 */
export function escapeHtml(text: string): string {
  return String(text).replace(/[&<>"']/g, (c) => HTML_ESCAPES[c]!);
}

/** Formats a duration in ms as e.g. "2d 3h", "4m 5s", "12.3 ms". */
export function formatUptime(ms: number): string {
  const seconds = Math.max(0, Math.floor(ms / 1000));
  const d = Math.floor(seconds / 86400);
  const h = Math.floor((seconds % 86400) / 3600);
  const m = Math.floor((seconds % 3600) / 60);
  const s = seconds % 60;
  if (d > 0) return `${d}d ${h}h`;
  if (h > 0) return `${h}h ${m}m`;
  if (m > 0) return `${m}m ${s}s`;
  return `${s}s`;
}

function formatMs(ms: number): string {
  if (ms >= 10_000) return `${(ms / 1000).toFixed(1)} s`;
  if (ms >= 100) return `${Math.round(ms)} ms`;
  return `${ms.toFixed(1)} ms`;
}

const CHART_WIDTH = 720;
const CHART_HEIGHT = 140;

/** An inline SVG bar chart of sync durations, oldest left. */
function durationChart(syncs: readonly SyncRecord[]): string {
  if (syncs.length === 0) {
    return `<p class="muted">No sync yet.</p>`;
  }
  const max = Math.max(...syncs.map((s) => s.durationMs), 1);
  const slots = Math.max(syncs.length, 50);
  const slot = CHART_WIDTH / slots;
  const bar = Math.max(2, slot * 0.75);
  const top = 14;
  const plot = CHART_HEIGHT - top - 16;
  const bars = syncs.map((s, i) => {
    const h = Math.max(1.5, (s.durationMs / max) * plot);
    const x = i * slot + (slot - bar) / 2;
    const y = top + plot - h;
    const cls = !s.ok ? "fail" : s.full ? "full" : "partial";
    const title = `${iso(s.at)}: ${s.ok ? (s.full ? "full" : "partial") : "failed"}, ${
      formatMs(s.durationMs)
    }, ${s.changed} changed`;
    return `<rect class="${cls}" x="${x.toFixed(1)}" y="${y.toFixed(1)}" width="${
      bar.toFixed(1)
    }" height="${h.toFixed(1)}"><title>${escapeHtml(title)}</title></rect>`;
  });
  const base = top + plot;
  return `<svg class="chart" role="img" aria-label="Durations of the last ${syncs.length} syncs" ` +
    `viewBox="0 0 ${CHART_WIDTH} ${CHART_HEIGHT}" width="${CHART_WIDTH}" height="${CHART_HEIGHT}">` +
    `<line class="axis" x1="0" y1="${base}" x2="${CHART_WIDTH}" y2="${base}"/>` +
    `<line class="grid" x1="0" y1="${top}" x2="${CHART_WIDTH}" y2="${top}"/>` +
    `<text x="2" y="10">max ${escapeHtml(formatMs(max))}</text>` +
    `<text x="2" y="${CHART_HEIGHT - 3}">oldest</text>` +
    `<text x="${CHART_WIDTH - 2}" y="${CHART_HEIGHT - 3}" text-anchor="end">latest</text>` +
    bars.join("") + `</svg>`;
}

function familyRows(s: StatusSnapshot): string {
  if (s.families === undefined) {
    return `<tr><td colspan="6" class="muted">Nothing programmed yet (no successful sync).</td></tr>`;
  }
  const rows: string[] = [];
  for (const [name, c] of [["IPv4", s.families.ipv4], ["IPv6", s.families.ipv6]] as const) {
    rows.push(
      `<tr><th scope="row">${name}</th><td class="num">${c.services}</td><td class="num">${c.servicePorts}</td>` +
        `<td class="num">${c.endpoints}</td><td class="num">${c.localEndpoints}</td>` +
        `<td class="num">${c.withoutEndpoints}</td></tr>`,
    );
  }
  return rows.join("\n");
}

function withoutEndpointsList(s: StatusSnapshot): string {
  if (s.families === undefined) return "";
  const { ipv4, ipv6 } = s.families;
  const total = ipv4.withoutEndpoints + ipv6.withoutEndpoints;
  if (total === 0) return "";
  const ids = [...ipv4.withoutEndpointsIds, ...ipv6.withoutEndpointsIds];
  const shown = ids.map((id) => `<li><code>${escapeHtml(id)}</code></li>`);
  const more = total > ids.length ? `<li class="muted">and ${total - ids.length} more</li>` : "";
  return `<details open><summary>Service ports without endpoints (${total})</summary><ul>${
    shown.join("")
  }${more}</ul></details>`;
}

function syncRows(syncs: readonly SyncRecord[]): string {
  if (syncs.length === 0) return `<tr><td colspan="5" class="muted">No sync yet.</td></tr>`;
  return [...syncs].reverse().slice(0, 20).map((s) => {
    const result = s.ok
      ? `<span class="ok">ok</span>`
      : `<span class="bad">failed</span> ${escapeHtml(s.error ?? "")}`;
    return `<tr><td><time datetime="${escapeHtml(iso(s.at))}">${
      escapeHtml(iso(s.at).replace("T", " ").replace("Z", ""))
    }</time></td><td>${s.full ? "full" : "partial"}</td><td class="num">${
      escapeHtml(formatMs(s.durationMs))
    }</td><td class="num">${s.changed}</td><td>${result}</td></tr>`;
  }).join("\n");
}

const STYLE = `
:root { color-scheme: light dark; --fg: #1b1f24; --muted: #667085; --bg: #fff; --card: #f6f8fa;
  --line: #d0d7de; --ok: #1a7f37; --bad: #cf222e; --full: #0969da; --partial: #54aeff; }
@media (prefers-color-scheme: dark) { :root { --fg: #e6edf3; --muted: #8b949e; --bg: #0d1117;
  --card: #161b22; --line: #30363d; --full: #2f81f7; --partial: #79c0ff; } }
* { box-sizing: border-box; }
body { margin: 0; padding: 24px 32px; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif;
  color: var(--fg); background: var(--bg); }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 16px; margin: 24px 0 8px; }
.muted { color: var(--muted); }
.facts { display: flex; flex-wrap: wrap; gap: 12px; margin: 16px 0; padding: 0; list-style: none; }
.facts li { background: var(--card); border: 1px solid var(--line); border-radius: 8px; padding: 8px 14px; min-width: 120px; }
.facts b { display: block; font-size: 12px; font-weight: 500; color: var(--muted); }
.facts span { font-size: 16px; font-weight: 600; }
table { border-collapse: collapse; min-width: 480px; }
th, td { text-align: left; padding: 5px 12px; border-bottom: 1px solid var(--line); }
thead th { font-size: 12px; color: var(--muted); font-weight: 600; }
.num { text-align: right; font-variant-numeric: tabular-nums; }
.ok { color: var(--ok); font-weight: 600; } .bad { color: var(--bad); font-weight: 600; }
.error { border-left: 4px solid var(--bad); background: var(--card); padding: 8px 12px; margin: 8px 0;
  white-space: pre-wrap; word-break: break-word; }
svg.chart { background: var(--card); border: 1px solid var(--line); border-radius: 8px; max-width: 100%; height: auto; }
svg.chart text { font-size: 10px; fill: var(--muted); }
svg.chart .axis { stroke: var(--line); } svg.chart .grid { stroke: var(--line); stroke-dasharray: 3 3; }
rect.full { fill: var(--full); } rect.partial { fill: var(--partial); } rect.fail { fill: var(--bad); }
.legend span { display: inline-block; width: 10px; height: 10px; margin: 0 4px 0 12px; border-radius: 2px; }
code { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 13px; }
`;

/**
 * Renders the status page. Pure; every value from the snapshot is escaped.
 *
 * @param s The snapshot.
 * @returns A complete HTML document.
 */
export function renderStatusHtml(s: StatusSnapshot): string {
  const e = escapeHtml;
  const health = s.healthy
    ? `<span class="ok">healthy</span>`
    : `<span class="bad">unhealthy</span>`;
  const last = s.syncs.at(-1);
  const lastSync = last === undefined
    ? "never"
    : `${formatUptime(s.now - last.at)} ago (${
      last.ok ? (last.full ? "full" : "partial") : "failed"
    })`;
  const failure = s.lastFailure === undefined
    ? `<p class="muted">No failed sync since start.</p>`
    : `<p>Last failure at <time datetime="${e(iso(s.lastFailure.at))}">${
      e(iso(s.lastFailure.at))
    }</time>:</p><pre class="error">${e(s.lastFailure.error ?? "unknown error")}</pre>`;
  return `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>kproxy status: ${e(s.node)}</title>
<style>${STYLE}</style>
</head>
<body>
<h1>kproxy on ${e(s.node)}</h1>
<p class="muted">version ${e(s.version)} · ${e(s.mode)} mode · ${health} · as of <time datetime="${
    e(iso(s.now))
  }">${e(iso(s.now))}</time></p>
<ul class="facts">
<li><b>Mode</b><span>${e(s.mode)}</span></li>
<li><b>Uptime</b><span>${e(formatUptime(s.uptimeMs))}</span></li>
<li><b>Last sync</b><span>${e(lastSync)}</span></li>
<li><b>Syncs</b><span>${s.totalSyncs}</span></li>
<li><b>Failed syncs</b><span>${s.failedSyncs}</span></li>
<li><b>Drift repairs</b><span>${s.driftRepairs}</span></li>
</ul>
<h2>Programmed</h2>
<table id="families">
<thead><tr><th>Family</th><th class="num">Services</th><th class="num">Service ports</th><th class="num">Endpoints</th><th class="num">Local endpoints</th><th class="num">Without endpoints</th></tr></thead>
<tbody>
${familyRows(s)}
</tbody>
</table>
${withoutEndpointsList(s)}
<h2>Sync durations</h2>
${durationChart(s.syncs)}
<p class="legend muted"><span style="background:var(--full)"></span>full<span style="background:var(--partial)"></span>partial<span style="background:var(--bad)"></span>failed</p>
<h2>Last syncs</h2>
<table id="syncs">
<thead><tr><th>Started (UTC)</th><th>Kind</th><th class="num">Duration</th><th class="num">Changed</th><th>Result</th></tr></thead>
<tbody>
${syncRows(s.syncs)}
</tbody>
</table>
<h2>Errors</h2>
${failure}
<p class="muted">JSON: <code>/statusz?format=json</code> · metrics: <code>/metrics</code></p>
</body>
</html>
`;
}
