/**
 * An explanation as text for a terminal.
 *
 * @module
 */

import type { IpFamily } from "../../core/model.ts";
import type { ServiceCounterSample } from "../../core/service_counters.ts";
import type { Explanation } from "./types.ts";

// ---------------------------------------------------------------------------
// Text.

/**
 * Formats an explanation for a terminal.
 *
 * @param e The explanation.
 * @returns Lines of text, ending in a newline.
 */
export function formatExplanation(e: Explanation): string {
  const address = e.family === "IPv6" ? `[${e.ip}]:${e.port}` : `${e.ip}:${e.port}`;
  const lines: string[] = [];
  const via = e.input.includes(e.ip) ? "" : ` (${e.input})`;
  lines.push(
    `${address}/${e.protocol}${via} on node ${e.node}${e.from === "" ? "" : `, from ${e.from}`}`,
  );
  const m = e.match;
  if (m === undefined) {
    lines.push(`  ${e.outcome}`);
    for (const note of e.notes) lines.push(`  note: ${note}`);
    return lines.join("\n") + "\n";
  }
  lines.push(`  service port:     ${m.id} (${m.kind})`);
  const why = m.planReason.startsWith(m.policy.split(" ")[0]!)
    ? m.planReason
    : `${m.policy}, ${m.planReason}`;
  lines.push(`  traffic:          ${m.traffic} (${why})`);
  lines.push(`  endpoints:        ${m.eligibleCount} of ${m.endpoints.length} eligible`);
  for (const ep of m.endpoints) {
    const where = [ep.nodeName || "no node", ep.zone].filter((s) => s !== "").join(" ");
    const target = ep.port === 0 ? ep.ip : `${ep.ip}:${ep.port}`;
    lines.push(
      `    ${ep.eligible ? "+" : "-"} ${target.padEnd(22)} ${where.padEnd(16)} ${ep.reason}`,
    );
  }
  lines.push(`  session affinity: ${m.affinity.text}`);
  lines.push(`  masquerade:       ${m.masquerade.answer}: ${m.masquerade.reason}`);
  lines.push(`  source ranges:    ${m.sourceRanges.text}`);
  if (m.healthCheckNodePort > 0) {
    lines.push(`  health check:     node port ${m.healthCheckNodePort}`);
  }
  lines.push(`  result:           ${e.outcome}`);
  for (const note of e.notes) lines.push(`  note: ${note}`);
  return lines.join("\n") + "\n";
}

/**
 * The counters line of the traced service port: connections and refused
 * packets by reason, as the kernel counted them since the port was created.
 */
export function formatCounters(
  counters: { samples: readonly ServiceCounterSample[] } | { unavailable: string },
  id: string,
  family: IpFamily,
): string {
  if ("unavailable" in counters) {
    return `  counters:         unavailable: ${counters.unavailable}\n`;
  }
  const mine = counters.samples.filter((s) => s.service.id === id && s.family === family);
  if (mine.length === 0) return "  counters:         none in the kernel for this service port\n";
  const connections = mine.find((s) => s.counter === "connections");
  const refused = mine.filter((s) => s.counter !== "connections")
    .map((s) => `${s.counter} ${s.packets}`);
  const parts = [
    ...(connections === undefined ? [] : [`connections ${connections.packets}`]),
    ...(refused.length === 0 ? [] : [`refused packets: ${refused.join(", ")}`]),
  ];
  return `  counters:         ${parts.join("; ")}\n`;
}
