/**
 * Feature gates as kube-proxy 1.36 reads them: every gate the binary
 * registers ({@linkcode FEATURE_GATES}) and `AllAlpha`/`AllBeta`; an unknown
 * gate is a warning, a locked gate set away from its default, a pre-alpha
 * gate or an enabled gate whose dependencies are off is an error.
 *
 * @module
 */

import { FEATURE_GATES, type GateSpec } from "./feature_gates.ts";

/**
 * kproxy's own gates, unknown to kube-proxy 1.36: `ServiceTopology` turns on
 * `spec.topologyKeys` (the alpha Service Topology of seed 002).
 */
export const KPROXY_GATES: Readonly<Record<string, GateSpec>> = Object.freeze({
  ServiceTopology: { default: false, stage: "Alpha" },
});

const ALL_ALPHA = "AllAlpha";
const ALL_BETA = "AllBeta";

/** The spec of a gate kproxy knows (upstream's or its own), or undefined. */
export function gateSpec(name: string): GateSpec | undefined {
  if (name === ALL_ALPHA) return { default: false, stage: "Alpha" };
  if (name === ALL_BETA) return { default: false, stage: "Beta" };
  return Object.hasOwn(FEATURE_GATES, name)
    ? FEATURE_GATES[name]
    : Object.hasOwn(KPROXY_GATES, name)
    ? KPROXY_GATES[name]
    : undefined;
}

/** Every known gate at its default. */
export function defaultFeatureGates(): Record<string, boolean> {
  const gates: Record<string, boolean> = {};
  for (const [name, spec] of Object.entries({ ...FEATURE_GATES, ...KPROXY_GATES })) {
    gates[name] = spec.default;
  }
  return gates;
}

/** What {@linkcode resolveFeatureGates} found. */
export interface ResolvedGates {
  /** Every known gate's value, after the requests. */
  gates: Record<string, boolean>;
  /** Unknown gates, and GA or deprecated gates that were set, as kube-proxy logs them. */
  warnings: string[];
  /** Why the requests cannot be applied; empty when they can. */
  errors: string[];
}

/**
 * Applies requested gate values over the defaults as kube-proxy 1.36's
 * feature gate does (`SetFromMap`).
 *
 * @param requested Gate name → value, as given in `--feature-gates` or `featureGates`.
 * @returns The effective gates, warnings and errors.
 * @example Usage
 * ```ts
 * resolveFeatureGates({ AllAlpha: false, Bogus: true }).warnings; // ["unrecognized feature gate: Bogus"]
 * ```
 */
export function resolveFeatureGates(requested: Readonly<Record<string, boolean>>): ResolvedGates {
  const gates = defaultFeatureGates();
  const warnings: string[] = [];
  const errors: string[] = [];
  const explicit = new Set<string>();
  const sweeps: [string, boolean][] = [];
  for (const [name, value] of Object.entries(requested)) {
    const spec = gateSpec(name);
    if (spec === undefined) {
      warnings.push(`unrecognized feature gate: ${name}`);
      continue;
    }
    if (spec.locked && spec.default !== value) {
      errors.push(
        `cannot set feature gate ${name} to ${value}, feature is locked to ${spec.default}`,
      );
      continue;
    }
    if (name === ALL_ALPHA || name === ALL_BETA) {
      sweeps.push([name === ALL_ALPHA ? "Alpha" : "Beta", value]);
      gates[name] = value;
      continue;
    }
    if (spec.stage === "PreAlpha") {
      errors.push(`cannot set feature gate ${name} to ${value}, feature is PreAlpha at 1.36`);
      continue;
    }
    gates[name] = value;
    explicit.add(name);
    if (spec.stage === "GA" || spec.stage === "Deprecated") {
      warnings.push(
        `setting ${spec.stage} feature gate ${name}=${value}. It will be removed in a future release.`,
      );
    }
  }
  for (const [stage, value] of sweeps) {
    for (const [name, spec] of Object.entries({ ...FEATURE_GATES, ...KPROXY_GATES })) {
      if (spec.stage === stage && !explicit.has(name)) gates[name] = value;
    }
  }
  if (errors.length === 0) {
    for (const [name, spec] of Object.entries(FEATURE_GATES)) {
      if (!gates[name] || spec.dependsOn === undefined) continue;
      const off = spec.dependsOn.filter((dependency) => gates[dependency] !== true);
      if (off.length > 0) {
        errors.push(
          `${name} is enabled, but depends on features that are disabled: [${off.join(" ")}]`,
        );
      }
    }
  }
  return { gates, warnings, errors };
}

/**
 * The gates `--help` lists, as kube-proxy does: AllAlpha and AllBeta, then
 * every gate that is neither GA nor deprecated, with its stage and default
 * (each is set as `Name=true|false`).
 */
export function featureGatesHelp(): string {
  const listed = Object.entries({ ...FEATURE_GATES, ...KPROXY_GATES })
    .filter(([, spec]) => spec.stage !== "GA" && spec.stage !== "Deprecated")
    .sort(([a], [b]) => (a < b ? -1 : 1))
    .map(([name, spec]) => `${name} (${spec.stage.toUpperCase()} - default=${spec.default})`);
  return ["AllAlpha (ALPHA - default=false)", "AllBeta (BETA - default=false)", ...listed]
    .join(", ");
}
