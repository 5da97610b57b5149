/**
 * `kproxy explain DEST`: why a packet to DEST goes where it goes.
 *
 * Pure: the caller hands in the cluster state, the node's plans and the
 * planner options; {@linkcode explain} answers which service port DEST is,
 * which endpoints traffic may use and, for every other endpoint of the
 * service, why not (`reasons.ts`). Every answer is read from the
 * {@linkcode NodePlans} (the same decisions every backend renders); the
 * reasons for exclusions are derived with the planner's own building blocks
 * (`mergeSliceEndpoints`, `selectTopologyEndpoints`), never by a second copy
 * of the policy. When a derived reason and the plan disagree, the plan wins.
 *
 * @module
 */

import { cidrContains, isLoopback, joinHostPort, parseIP } from "../../core/ip.ts";
import type { IpFamily, Protocol } from "../../core/model.ts";
import { serviceKey } from "../../core/model.ts";
import type { Plan, ServicePortPlan } from "../../core/plan.ts";
import { planNode } from "../../core/planner.ts";
import { type Destination, parseDestination } from "./destination.ts";
import { explainMatch, outcomeOf } from "./reasons.ts";
import type { AddressKind, Context, ExplainInput, Explanation } from "./types.ts";

/**
 * Explains where a packet to `input.destination` goes on a node.
 *
 * @example Usage
 * ```ts ignore
 * const plans = planNode({ state, options });
 * const e = explain({ state, plans, options, destination: "10.96.0.10:80", from: "10.244.1.5" });
 * console.log(formatExplanation(e));
 * ```
 *
 * @param input The state, plans and options, DEST and optionally the source and node.
 * @returns The explanation.
 * @throws {TypeError} When DEST or `from` do not parse.
 * @throws {RangeError} When DEST names an unknown service or port, or `node` is unknown.
 */
export function explain(input: ExplainInput): Explanation {
  const destination = parseDestination(input.destination);
  const from = parseFrom(input.from);
  const ctx = contextFor(input, from);
  const target = resolveDestination(destination, input.destination, ctx);
  const base = {
    input: input.destination,
    ...target,
    node: ctx.nodeName,
    from,
  };
  const fromFamily = from === "" ? undefined : parseIP(from)?.family;
  if (fromFamily !== undefined && fromFamily !== target.family) {
    throw new TypeError(
      `Cannot explain ${input.destination} from ${from}: the source is ${fromFamily} but the destination is ${target.family}`,
    );
  }
  const plan = target.family === "IPv4" ? ctx.plans.ipv4 : ctx.plans.ipv6;
  const found = findServicePort(plan, target);
  if (found === undefined) {
    const miss = explainMiss(ctx, plan, target);
    return { ...base, outcome: miss.outcome, notes: miss.notes };
  }
  const notes: string[] = [];
  const match = explainMatch(ctx, found.plan, found.kind, notes);
  notes.push(...otherClaimants(plan, found, target));
  return { ...base, match, outcome: outcomeOf(match), notes };
}

/** One note per other service port that declares the frontend `holder` holds
 * (`ServicePortPlan.shadowed`, decided by the planner). */
function otherClaimants(
  plan: Plan,
  found: { plan: ServicePortPlan; kind: AddressKind },
  target: Target,
): string[] {
  const holder = found.plan;
  const nodePort = found.kind === "node port";
  const frontend = `${joinHostPort(target.ip, target.port)}/${target.protocol}`;
  return plan.services
    .filter((sp) =>
      sp.protocol === target.protocol &&
      sp.shadowed?.some((lost) =>
        lost.heldBy === holder.id && lost.port === target.port &&
        (nodePort ? lost.kind === "nodePort" : lost.address === target.ip)
      )
    )
    .map((sp) =>
      `${sp.id} declares ${frontend} too; ${holder.id} holds it, as the lowest service port id claiming it`
    );
}

function parseFrom(from: string | undefined): string {
  if (from === undefined || from.trim() === "") return "";
  const ip = parseIP(from.trim());
  if (ip === undefined) {
    throw new TypeError(`Cannot parse --from ${JSON.stringify(from)}: not an IP address`);
  }
  return ip.address;
}

/** Plans as seen from `input.node`: the given plans, or a replan for another node. */
function contextFor(input: ExplainInput, from: string): Context {
  const nodeName = input.node === undefined || input.node === ""
    ? input.options.nodeName
    : input.node;
  const node = input.state.nodes.get(nodeName);
  let options = input.options;
  let plans = input.plans;
  const thisNode = nodeName === input.options.nodeName;
  if (!thisNode) {
    if (node === undefined) {
      const known = [...input.state.nodes.keys()].sort().join(", ") || "none";
      throw new RangeError(
        `Cannot explain as seen from node ${
          JSON.stringify(nodeName)
        }: no such node (known: ${known})`,
      );
    }
    options = { ...input.options, nodeName, localAddresses: [...node.addresses] };
    plans = planNode({ state: input.state, options });
  }
  const nodeAddresses = [...new Set([...(node?.addresses ?? []), ...options.localAddresses])];
  return {
    state: input.state,
    options,
    plans,
    nodeName,
    nodeLabels: node?.labels ?? {},
    nodeAddresses,
    from,
  };
}

interface Target {
  ip: string;
  port: number;
  protocol: Protocol;
  family: IpFamily;
}

function resolveDestination(destination: Destination, text: string, ctx: Context): Target {
  if (destination.kind === "address") {
    const { ip, port, protocol, family } = destination;
    return { ip, port, protocol, family };
  }
  const key = serviceKey(destination.namespace, destination.name);
  const service = ctx.state.services.get(key);
  if (service === undefined) {
    throw new RangeError(`Cannot explain ${text}: no service ${key} (or kproxy ignores it)`);
  }
  const wanted = destination.port;
  const candidates = service.ports.filter((p) =>
    (typeof wanted === "number" ? p.port === wanted : p.name === wanted) &&
    (destination.protocol === undefined || p.protocol === destination.protocol)
  );
  const port = candidates.find((p) => p.protocol === "TCP") ?? candidates[0];
  if (port === undefined) {
    const have = service.ports.map((p) =>
      `${p.name === "" ? "" : `${p.name}=`}${p.port}/${p.protocol}`
    );
    throw new RangeError(
      `Cannot explain ${text}: service ${key} has no port ${wanted}${
        destination.protocol ? `/${destination.protocol}` : ""
      } (it has ${have.join(", ") || "none"})`,
    );
  }
  const fromFamily = ctx.from === "" ? undefined : parseIP(ctx.from)?.family;
  const ip = service.clusterIPs.find((candidate) => parseIP(candidate)?.family === fromFamily) ??
    service.clusterIPs[0];
  const family = ip === undefined ? undefined : parseIP(ip)?.family;
  if (ip === undefined || family === undefined) {
    throw new RangeError(`Cannot explain ${text}: service ${key} has no cluster IP (headless)`);
  }
  return { ip, port: port.port, protocol: port.protocol, family };
}

function findServicePort(
  plan: Plan,
  target: Target,
): { plan: ServicePortPlan; kind: AddressKind } | undefined {
  const onPort = plan.services.filter((sp) => sp.protocol === target.protocol);
  const checks: [AddressKind, (sp: ServicePortPlan) => boolean][] = [
    ["cluster IP", (sp) => sp.port === target.port && sp.clusterIPs.includes(target.ip)],
    ["load-balancer IP", (sp) => sp.port === target.port && sp.loadBalancerIPs.includes(target.ip)],
    ["external IP", (sp) => sp.port === target.port && sp.externalIPs.includes(target.ip)],
    [
      "node port",
      (sp) =>
        sp.nodePort > 0 && sp.nodePort === target.port &&
        plan.nodePortAddresses.includes(target.ip),
    ],
  ];
  for (const [kind, test] of checks) {
    const sp = onPort.find(test);
    if (sp !== undefined) return { plan: sp, kind };
  }
  return undefined;
}

// ---------------------------------------------------------------------------
// Not a service address.

function explainMiss(
  ctx: Context,
  plan: Plan,
  target: Target,
): { outcome: string; notes: string[] } {
  const notes: string[] = [];
  const address = `${target.ip}:${target.port}/${target.protocol}`;
  const ownerOf = (test: (sp: ServicePortPlan) => boolean, what: string): boolean => {
    const owners = plan.services.filter(test);
    if (owners.length === 0) return false;
    const ports = owners.map((sp) => `${sp.port}/${sp.protocol}`).join(", ");
    const services = [...new Set(owners.map((sp) => `${sp.namespace}/${sp.name}`))].join(", ");
    notes.push(
      `${target.ip} is the ${what} of ${services}, on ${ports}, not ${target.port}/${target.protocol}`,
    );
    return true;
  };
  const knownAddress = [
    ownerOf((sp) => sp.clusterIPs.includes(target.ip), "cluster IP"),
    ownerOf((sp) => sp.loadBalancerIPs.includes(target.ip), "load-balancer IP"),
    ownerOf((sp) => sp.externalIPs.includes(target.ip), "external IP"),
  ].some(Boolean);

  const nodeAddress = ctx.nodeAddresses.includes(target.ip) || isLoopback(target.ip);
  const capturing = plan.nodePortAddresses.includes(target.ip);
  const healthCheck = plan.services.find((sp) =>
    sp.healthCheckNodePort === target.port && target.protocol === "TCP"
  );
  if (healthCheck !== undefined && (nodeAddress || capturing)) {
    return {
      outcome:
        `answered by kproxy: health-check node port of ${healthCheck.namespace}/${healthCheck.name} ` +
        `(200 with ${healthCheck.localReadyEndpoints} local ready endpoint(s), 503 with none)`,
      notes,
    };
  }
  const nodePortOwner = plan.services.find((sp) =>
    sp.nodePort === target.port && sp.protocol === target.protocol
  );
  if (nodePortOwner !== undefined && !capturing) {
    const where = plan.nodePortAddresses.join(", ") || "no address";
    notes.push(
      `${target.port}/${target.protocol} is the node port of ${nodePortOwner.id}, but node ports are captured only on ${where}` +
        (isLoopback(target.ip) ? " (never on loopback)" : ""),
    );
  }
  // A service the planner skipped still owns its cluster IP in the state.
  for (const service of ctx.state.services.values()) {
    const skipped = service.clusterIPs.includes(target.ip) &&
      !plan.services.some((sp) => sp.namespace === service.namespace && sp.name === service.name);
    if (skipped) {
      notes.push(
        `${target.ip} is the cluster IP of ${service.namespace}/${service.name}, which the planner skipped (see the warnings in the log)`,
      );
    }
  }
  const cidr = plan.serviceCIDRs.find((c) => cidrContains(c, target.ip));
  if (cidr !== undefined) {
    const what = knownAddress ? "an unknown service port" : "unallocated";
    return {
      outcome:
        `not a service address; inside service CIDR ${cidr}: rejected as ${what} (${address})`,
      notes,
    };
  }
  return { outcome: "not a service address: kproxy does not touch it", notes };
}
