/**
 * Which service port holds a frontend two services claim: the same address,
 * protocol and port (cluster, external or load-balancer IP), or the same node
 * port and protocol. The apiserver allocates cluster IPs and node ports
 * uniquely but lets any number of Services declare one externalIP or
 * load-balancer IP and port, and a manifests directory allows anything.
 *
 * kube-proxy has no rule for it (kubernetes/kubernetes#69599): its iptables
 * mode writes the services in Go map order, which changes between syncs and
 * nodes, and the first matching `KUBE-SERVICES` rule wins. kproxy decides once,
 * here: the lowest service port id (`namespace/name:port/protocol`) holds the
 * frontend in every mode, and the others list it in `shadowed`.
 *
 * @module
 */

import type { FrontendKind, Plan, ServicePortPlan, ShadowedFrontend } from "./plan.ts";
import { SnapshotMap } from "./snapshot_map.ts";

interface Frontend {
  kind: FrontendKind;
  address: string;
  port: number;
}

/** The claims index of each plan the planner made, so the next incremental replan
 * updates it instead of rebuilding it; a plan without one (made elsewhere) rebuilds it. */
const INDEX = new WeakMap<Plan, { map: SnapshotMap<string, readonly string[]>; at: unknown }>();

/** Every frontend a service port declares: those it holds and those it lost. */
function declaredFrontends(service: ServicePortPlan): Frontend[] {
  const frontends: Frontend[] = [];
  const add = (kind: FrontendKind, addresses: readonly string[]) => {
    for (const address of addresses) frontends.push({ kind, address, port: service.port });
  };
  add("clusterIP", service.clusterIPs);
  add("externalIP", service.externalIPs);
  add("loadBalancerIP", service.loadBalancerIPs);
  if (service.nodePort !== 0) {
    frontends.push({ kind: "nodePort", address: "", port: service.nodePort });
  }
  for (const { kind, address, port } of service.shadowed ?? []) {
    frontends.push({ kind, address, port });
  }
  return frontends;
}

/** The keys of the frontends a service port holds (its lists and node port). */
export function heldFrontendKeys(service: ServicePortPlan): string[] {
  const keys: string[] = [];
  for (const addresses of [service.clusterIPs, service.externalIPs, service.loadBalancerIPs]) {
    for (const address of addresses) keys.push(keyOf(address, service.protocol, service.port));
  }
  if (service.nodePort !== 0) keys.push(keyOf("*", service.protocol, service.nodePort));
  return keys;
}

function frontendKey(service: ServicePortPlan, frontend: Frontend): string {
  const address = frontend.kind === "nodePort" ? "*" : frontend.address;
  return keyOf(address, service.protocol, frontend.port);
}

/** One frontend's key: its address (`*` for a node port), protocol and port. */
function keyOf(address: string, protocol: string, port: number): string {
  return `${address} ${protocol} ${port}`;
}

/**
 * The claimants of every frontend of one family's plan, sorted by service
 * port id. A snapshot-backed map, so that updating it for one changed service
 * costs that service, not the cluster.
 */
export class FrontendClaims {
  #map: SnapshotMap<string, readonly string[]>;

  private constructor(map: SnapshotMap<string, readonly string[]>) {
    this.#map = map;
  }

  /** The claims of `services` (declared frontends, whoever holds them). */
  static of(services: readonly ServicePortPlan[]): FrontendClaims {
    const claims = new FrontendClaims(new SnapshotMap());
    for (const service of services) claims.claim(service);
    return claims;
  }

  /** The claims of a plan the planner made, to update for the next one. */
  static after(plan: Plan): FrontendClaims {
    const kept = INDEX.get(plan);
    if (kept !== undefined && kept.map.share() === kept.at) return new FrontendClaims(kept.map);
    return FrontendClaims.of(plan.services);
  }

  /** Keeps these claims as those of `plan`, for {@linkcode FrontendClaims.after}. */
  rememberFor(plan: Plan): void {
    INDEX.set(plan, { map: this.#map, at: this.#map.share() });
  }

  /** Adds the claims of `service`; each frontend key it touches goes into `touched`. */
  claim(service: ServicePortPlan, touched?: Set<string>): void {
    for (const frontend of declaredFrontends(service)) {
      const key = frontendKey(service, frontend);
      touched?.add(key);
      const ids = this.#map.get(key) ?? [];
      if (ids.includes(service.id)) continue;
      this.#map.set(key, [...ids, service.id].sort());
    }
  }

  /** Removes the claims of `service`; each frontend key it touches goes into `touched`. */
  release(service: ServicePortPlan, touched: Set<string>): void {
    for (const frontend of declaredFrontends(service)) {
      const key = frontendKey(service, frontend);
      touched.add(key);
      const ids = this.#map.get(key)?.filter((id) => id !== service.id) ?? [];
      if (ids.length === 0) this.#map.delete(key);
      else this.#map.set(key, ids);
    }
  }

  /** The ids of the service ports claiming the frontend `key`, lowest (the holder) first. */
  claimants(key: string): readonly string[] {
    return this.#map.get(key) ?? [];
  }

  /**
   * A freshly planned `service` with the frontends another service port holds
   * left out and listed in `shadowed`; the same object when it holds all.
   */
  resolve(service: ServicePortPlan): ServicePortPlan {
    const shadowed: ShadowedFrontend[] = [];
    for (const frontend of declaredFrontends(service)) {
      const heldBy = this.claimants(frontendKey(service, frontend))[0] ?? service.id;
      if (heldBy !== service.id) shadowed.push({ ...frontend, heldBy });
    }
    if (shadowed.length === 0) return service;
    const held = (kind: FrontendKind, addresses: readonly string[]) =>
      addresses.filter((address) =>
        !shadowed.some((lost) => lost.kind === kind && lost.address === address)
      );
    return {
      ...service,
      clusterIPs: held("clusterIP", service.clusterIPs),
      externalIPs: held("externalIP", service.externalIPs),
      loadBalancerIPs: held("loadBalancerIP", service.loadBalancerIPs),
      nodePort: shadowed.some((lost) => lost.kind === "nodePort") ? 0 : service.nodePort,
      shadowed,
    };
  }
}

/** The service key (`namespace/name`) of a service port id. */
export function serviceKeyOfPortId(id: string): string {
  return id.slice(0, id.indexOf(":"));
}
