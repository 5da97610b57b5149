/**
 * kproxy's nftables table as the kernel holds it, normalised for
 * comparisons with a fresh render, and the namespaces it lives in.
 *
 * @module
 */

import { renderFull } from "../../backends/nftables/render.ts";
import type { Config } from "../../lib/config/types.ts";
import type { NodePlans } from "../../lib/core/plan.ts";
import { HostExecutor, NetnsExecutor } from "../netns.ts";
import type { ApiObject } from "./fake_apiserver.ts";

/** Runs `nft` in `ns`; returns stdout, or undefined when it exits non-zero. */
export async function nftIn(
  ns: string,
  args: string[],
  stdin?: string,
): Promise<string | undefined> {
  const result = await new NetnsExecutor({ namespace: ns, inner: new HostExecutor() }).run({
    program: "nft",
    args,
    stdin,
    timeoutMs: 60_000,
  });
  return result.code === 0 ? result.stdout : undefined;
}

/** A canonical form of one nftables table for equality checks. */
export interface CanonicalTable {
  chains: Record<string, { base?: string; rules: string[] }>;
  sets: Record<string, { spec: string; elements: string[] }>;
}

/**
 * Lists `family table` in `ns` as JSON and canonicalises it: no handles,
 * counters or canary generation (in the `canary` set or chain); set and map elements sorted; rules kept in
 * order per chain. Undefined when the table does not exist.
 */
export async function canonicalTable(
  ns: string,
  family = "ip",
  table = "kproxy",
): Promise<CanonicalTable | undefined> {
  const text = await nftIn(ns, ["-j", "list", "table", family, table]);
  if (text === undefined) return undefined;
  const canonical: CanonicalTable = { chains: {}, sets: {} };
  for (const item of JSON.parse(text).nftables as ApiObject[]) {
    if (item.chain) {
      const { name, hook, prio, type, policy } = item.chain;
      canonical.chains[name] = {
        base: hook === undefined ? undefined : `${type} ${hook} ${prio} ${policy}`,
        rules: [],
      };
    } else if (item.set || item.map) {
      const set = item.set ?? item.map;
      const spec = JSON.stringify([item.set ? "set" : "map", set.type, set.map, set.flags]);
      const elements = set.name === "canary"
        ? ["generation N"]
        // Element counters (--service-counters) are traffic, not state.
        : ((set.elem ?? []) as unknown[]).map((element) =>
          JSON.stringify(element, (key, value) => key === "counter" ? {} : value)
        ).sort();
      canonical.sets[set.name] = { spec, elements };
    }
  }
  for (const item of JSON.parse(text).nftables as ApiObject[]) {
    if (!item.rule) continue;
    const { chain, expr, comment } = item.rule;
    const rule = JSON.stringify(
      { expr, comment },
      (key, value) => key === "counter" ? {} : value,
    ).replace(/kproxy generation \d+/, "kproxy generation N");
    canonical.chains[chain]?.rules.push(rule);
  }
  return canonical;
}

/** Number of rules in `family table`'s `chain` in `ns`, undefined when it is missing. */
export async function ruleCount(
  ns: string,
  chain: string,
  family = "ip",
  table = "kproxy",
): Promise<number | undefined> {
  const text = await nftIn(ns, ["-j", "list", "chain", family, table, chain]);
  if (text === undefined) return undefined;
  return (JSON.parse(text).nftables as ApiObject[]).filter((item) => item.rule).length;
}

/** Creates an empty network namespace `name` for scratch loads; delete it with {@linkcode deleteNamespace}. */
export async function createNamespace(name: string): Promise<void> {
  const result = await new HostExecutor().run({ program: "ip", args: ["netns", "add", name] });
  if (result.code !== 0) throw new Error(`Cannot create namespace ${name}: ${result.stderr}`);
}

/** Deletes a namespace made by {@linkcode createNamespace}; ignores a missing one. */
export async function deleteNamespace(name: string): Promise<void> {
  await new HostExecutor().run({ program: "ip", args: ["netns", "del", name] });
}

/** Options for {@linkcode diffTables}. */
export interface DiffOptions {
  /** Sets whose extra elements are tolerated (missing ones are still differences). */
  tolerateExtraIn?: readonly string[];
}

/**
 * Human-readable differences between two canonical tables (empty when
 * equal): chains and sets leaked or missing, rules and elements extra or
 * missing.
 */
export function diffTables(
  actual: CanonicalTable | undefined,
  expected: CanonicalTable | undefined,
  options: DiffOptions = {},
): string[] {
  if (actual === undefined || expected === undefined) {
    return actual === expected ? [] : [`table ${actual ? "unexpected" : "missing"}`];
  }
  const differences: string[] = [];
  const show = (items: string[]) => JSON.stringify(items).slice(0, 400);
  for (const name of new Set([...Object.keys(actual.chains), ...Object.keys(expected.chains)])) {
    const a = actual.chains[name];
    const e = expected.chains[name];
    if (e === undefined) differences.push(`leaked chain ${name}`);
    else if (a === undefined) differences.push(`missing chain ${name}`);
    else if (JSON.stringify(a) !== JSON.stringify(e)) {
      differences.push(`chain ${name} differs: ${show(a.rules)} vs ${show(e.rules)}`);
    }
  }
  for (const name of new Set([...Object.keys(actual.sets), ...Object.keys(expected.sets)])) {
    const a = actual.sets[name];
    const e = expected.sets[name];
    if (e === undefined) differences.push(`leaked set ${name}`);
    else if (a === undefined) differences.push(`missing set ${name}`);
    else if (a.spec !== e.spec) differences.push(`set ${name} differs: ${a.spec} vs ${e.spec}`);
    else {
      const extra = a.elements.filter((element) => !e.elements.includes(element));
      const missing = e.elements.filter((element) => !a.elements.includes(element));
      if (extra.length > 0 && !options.tolerateExtraIn?.includes(name)) {
        differences.push(`leaked elements in ${name}: ${show(extra)}`);
      }
      if (missing.length > 0) differences.push(`missing elements in ${name}: ${show(missing)}`);
    }
  }
  return differences;
}

/** Elements of set `name` in `actual` that `expected` lacks. */
export function extraElements(
  actual: CanonicalTable | undefined,
  expected: CanonicalTable | undefined,
  name: string,
): string[] {
  const wanted = new Set(expected?.sets[name]?.elements ?? []);
  return (actual?.sets[name]?.elements ?? []).filter((element) => !wanted.has(element));
}

/**
 * Loads a fresh full render of `plans` into the empty namespace `scratch`
 * (flushing it first) with the options kproxy's nftables backend derives from
 * `config`; throws when `nft` refuses it.
 */
export async function loadFreshRender(
  scratch: string,
  plans: NodePlans,
  config: Config,
): Promise<void> {
  const script = [plans.ipv4, plans.ipv6].map((plan) =>
    renderFull(plan, {
      table: "kproxy",
      masqueradeMark: 1 << config.nftables.masqueradeBit,
      dropInvalid: !config.conntrack.tcpBeLiberal,
    }).toString()
  ).join("");
  await nftIn(scratch, ["flush", "ruleset"]);
  if (await nftIn(scratch, ["-f", "-"], script) === undefined) {
    throw new Error(`Cannot load a fresh render into ${scratch}`);
  }
}
