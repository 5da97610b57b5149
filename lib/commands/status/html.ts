/**
 * The HTML form of the status page: self-contained (inline CSS and SVG, no
 * script, no external asset), every shown value escaped, since service names
 * and error messages come from the cluster.
 *
 * @module
 */

import type { SyncRecord } from "../../shell/sync_history.ts";
import { isoTime } from "./json.ts";
import type { StatusSnapshot } from "./snapshot.ts";

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
    const title = `${isoTime(s.at)}: ${s.ok ? (s.full ? "full" : "partial") : "failed"}, ${
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
    return `<tr><td><time datetime="${escapeHtml(isoTime(s.at))}">${
      escapeHtml(isoTime(s.at).replace("T", " ").replace("Z", ""))
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
    : `<p>Last failure at <time datetime="${e(isoTime(s.lastFailure.at))}">${
      e(isoTime(s.lastFailure.at))
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
    e(isoTime(s.now))
  }">${e(isoTime(s.now))}</time></p>
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
${trafficSection(s)}
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

/** The busiest service ports and the top refusers, when service counters are on. */
function trafficSection(s: StatusSnapshot): string {
  if (s.traffic === undefined) return "";
  const e = escapeHtml;
  const { windowSeconds, busiest, refusers } = s.traffic;
  if (windowSeconds === 0) {
    return `<h2>Traffic by Service</h2>\n<p class="muted">Counting; rates show after the next reading.</p>`;
  }
  const rows = (cells: string[][]) =>
    cells.map((row) => `<tr><td>${e(row[0]!)}</td><td class="num">${e(row[1]!)}</td></tr>`)
      .join("\n");
  const busy = busiest.length === 0
    ? `<p class="muted">No connection in the last ${Math.round(windowSeconds)} s.</p>`
    : `<table id="busiest">
<thead><tr><th>Service port</th><th class="num">Connections/s</th></tr></thead>
<tbody>
${rows(busiest.map((t) => [t.key, t.connectionsPerSecond.toFixed(2)]))}
</tbody>
</table>`;
  const refused = refusers.length === 0
    ? `<p class="muted">No packet refused in the last ${Math.round(windowSeconds)} s.</p>`
    : `<table id="refusers">
<thead><tr><th>Service port</th><th class="num">Refused packets</th></tr></thead>
<tbody>
${rows(refusers.map((t) => [t.key, String(t.refusedPackets)]))}
</tbody>
</table>`;
  return `<h2>Traffic by Service (last ${Math.round(windowSeconds)} s)</h2>
${busy}
<h2>Top refusers</h2>
${refused}`;
}
