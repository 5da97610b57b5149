/**
 * Reads the PromQL of scripts/deploy's alert rules and Grafana dashboard, the
 * metric names it selects, and the metric families a `/metrics` page serves:
 * enough to check that every query names a metric kproxy exports.
 *
 * @module
 */

import { parse as parseYaml } from "yaml";

/** One query and where it is. */
export interface NamedQuery {
  /** e.g. `alert KproxyDown` or `panel "Sync duration" A`. */
  where: string;
  expr: string;
}

const KEYWORDS = new Set([
  "and",
  "or",
  "unless",
  "bool",
  "offset",
  "by",
  "without",
  "on",
  "ignoring",
  "group_left",
  "group_right",
  "inf",
  "nan",
]);

/**
 * The metric names a PromQL expression selects, sorted: identifiers that are
 * not functions, keywords, label names or parts of strings, ranges and
 * grouping clauses.
 *
 * @example Usage
 * ```ts
 * import assert from "node:assert/strict";
 * assert.deepEqual(metricNames('sum by (le) (rate(a_bucket{job="x"}[5m]))'), ["a_bucket"]);
 * ```
 */
export function metricNames(expr: string): string[] {
  const stripped = expr
    .replace(/"(?:[^"\\]|\\.)*"/g, '""')
    .replace(/\{[^}]*\}/g, " ")
    .replace(/\[[^\]]*\]/g, " ")
    .replace(/\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, " ");
  const names = new Set<string>();
  for (const match of stripped.matchAll(/[a-zA-Z_:][a-zA-Z0-9_:]*/g)) {
    const before = stripped[match.index - 1] ?? " ";
    if (/[0-9.]/.test(before)) continue;
    const after = stripped.slice(match.index + match[0].length).trimStart();
    if (after.startsWith("(") || KEYWORDS.has(match[0].toLowerCase())) continue;
    names.add(match[0]);
  }
  return [...names].sort();
}

/** The `expr` of every rule in a Prometheus rules file. */
export function ruleQueries(text: string): NamedQuery[] {
  const file = parseYaml(text) as {
    groups: { rules: { alert?: string; record?: string; expr: string }[] }[];
  };
  return file.groups.flatMap((group) =>
    group.rules.map((rule) => ({
      where: rule.alert ? `alert ${rule.alert}` : `record ${rule.record}`,
      expr: String(rule.expr),
    }))
  );
}

/**
 * Every query of a Grafana dashboard: each panel target's `expr`, and the
 * series selector of each `label_values(selector, label)` template variable.
 */
export function dashboardQueries(dashboard: any): NamedQuery[] {
  const queries: NamedQuery[] = [];
  for (const panel of dashboard.panels ?? []) {
    for (const target of panel.targets ?? []) {
      queries.push({ where: `panel "${panel.title}" ${target.refId}`, expr: target.expr });
    }
  }
  for (const variable of dashboard.templating?.list ?? []) {
    if (variable.type !== "query") continue;
    const query = typeof variable.query === "string" ? variable.query : variable.query.query;
    const selector = /^label_values\((.*),\s*[a-zA-Z_][a-zA-Z0-9_]*\)$/.exec(query)?.[1];
    if (selector === undefined) {
      throw new TypeError(`Cannot read variable ${variable.name}: ${query}`);
    }
    queries.push({ where: `variable ${variable.name}`, expr: selector });
  }
  return queries;
}

/** Replaces Grafana's variables with values Prometheus can evaluate: all instances, 1m. */
export function withGrafanaVariables(expr: string, values: { job: string }): string {
  return expr
    .replaceAll("$__rate_interval", "1m")
    .replaceAll("$job", values.job)
    .replaceAll("$instance", ".*");
}

/** Metric families of a text exposition (`# TYPE name type` lines): name → type. */
export function exposedFamilies(text: string): Map<string, string> {
  const families = new Map<string, string>();
  for (const match of text.matchAll(/^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (\w+)$/gm)) {
    families.set(match[1]!, match[2]!);
  }
  return families;
}

/** The series names a family is scraped as: a histogram's `_bucket`, `_sum` and `_count`. */
export function seriesNames(name: string, type: string): string[] {
  return type === "histogram" ? [`${name}_bucket`, `${name}_sum`, `${name}_count`] : [name];
}
