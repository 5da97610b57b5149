/**
 * The pure incremental diff of the ipvs mode: from the virtual servers in the
 * kernel to the desired ones, the minimal ipvsadm operations, with graceful
 * termination of removed TCP real servers (weight 0 first, deleted later).
 *
 * @module
 */

import {
  type RealServer,
  realServerArgs,
  realServerKey,
  schedulingArgs,
  serviceArgs,
  type VirtualServer,
  virtualServerKey,
} from "./render.ts";

/** One ipvsadm operation. */
export type IpvsOp =
  | { kind: "add-service"; vs: VirtualServer }
  | { kind: "edit-service"; vs: VirtualServer }
  | { kind: "delete-service"; vs: VirtualServer }
  | { kind: "add-real"; vs: VirtualServer; rs: RealServer }
  | { kind: "edit-real"; vs: VirtualServer; rs: RealServer }
  | { kind: "delete-real"; vs: VirtualServer; rs: RealServer };

/** Whether a removed real server of this virtual server drains before deletion.
 * As upstream, only TCP does: UDP and SCTP real servers are deleted at once. */
function drainsGracefully(vs: Pick<VirtualServer, "protocol">): boolean {
  return vs.protocol === "TCP";
}

function sameScheduling(a: VirtualServer, b: VirtualServer): boolean {
  return a.scheduler === b.scheduler && a.persistenceSeconds === b.persistenceSeconds &&
    a.schedulerFlags.join(",") === b.schedulerFlags.join(",");
}

/**
 * Computes the ipvsadm operations that turn `current` (what the kernel holds,
 * draining real servers included with weight 0) into `desired`. Pure.
 *
 * - a virtual server only in `current` is deleted (with its real servers);
 * - a removed TCP real server is set to weight 0 (it then drains; see
 *   `graceful.ts`), other removed real servers are deleted;
 * - a real server that comes back while draining gets its weight again.
 */
export function diffIpvs(
  current: readonly VirtualServer[],
  desired: readonly VirtualServer[],
): IpvsOp[] {
  const ops: IpvsOp[] = [];
  const now = new Map(current.map((vs) => [virtualServerKey(vs), vs]));
  const wanted = new Set(desired.map(virtualServerKey));
  for (const vs of current) {
    if (!wanted.has(virtualServerKey(vs))) ops.push({ kind: "delete-service", vs });
  }
  for (const vs of desired) {
    const old = now.get(virtualServerKey(vs));
    if (old === undefined) {
      ops.push({ kind: "add-service", vs });
      for (const rs of vs.realServers) ops.push({ kind: "add-real", vs, rs });
      continue;
    }
    if (!sameScheduling(old, vs)) ops.push({ kind: "edit-service", vs });
    // New real servers first: ipvsadm applies line by line, so a sync that
    // stops half-way leaves every virtual server something to send to.
    const oldReals = new Map(old.realServers.map((rs) => [realServerKey(rs), rs]));
    const newReals = new Set(vs.realServers.map(realServerKey));
    for (const rs of vs.realServers) {
      const before = oldReals.get(realServerKey(rs));
      if (before === undefined) ops.push({ kind: "add-real", vs, rs });
      else if (before.weight !== rs.weight) ops.push({ kind: "edit-real", vs, rs });
    }
    for (const rs of old.realServers) {
      if (newReals.has(realServerKey(rs))) continue;
      if (!drainsGracefully(vs)) ops.push({ kind: "delete-real", vs, rs });
      else if (rs.weight !== 0) ops.push({ kind: "edit-real", vs, rs: { ...rs, weight: 0 } });
    }
  }
  return ops;
}

/** Renders one operation as an `ipvsadm --restore` line (no newline). */
function renderIpvsOp(op: IpvsOp): string {
  switch (op.kind) {
    case "add-service":
      return ["-A", ...serviceArgs(op.vs), ...schedulingArgs(op.vs)].join(" ");
    case "edit-service":
      return ["-E", ...serviceArgs(op.vs), ...schedulingArgs(op.vs)].join(" ");
    case "delete-service":
      return ["-D", ...serviceArgs(op.vs)].join(" ");
    case "add-real":
      return ["-a", ...serviceArgs(op.vs), ...realServerArgs(op.rs)].join(" ");
    case "edit-real":
      return ["-e", ...serviceArgs(op.vs), ...realServerArgs(op.rs)].join(" ");
    case "delete-real":
      return ["-d", ...serviceArgs(op.vs), "-r", realServerKey(op.rs)].join(" ");
  }
}

/** Renders operations as `ipvsadm --restore` input; "" when there are none. */
export function renderIpvsOps(ops: readonly IpvsOp[]): string {
  return ops.map((op) => renderIpvsOp(op) + "\n").join("");
}

/**
 * Applies operations to a model of the kernel's virtual servers and returns
 * the new model (sorted as rendered). Pure: inputs are not modified.
 */
export function applyIpvsOps(
  current: readonly VirtualServer[],
  ops: readonly IpvsOp[],
): VirtualServer[] {
  const servers = new Map(
    current.map((vs) => [virtualServerKey(vs), { ...vs, realServers: [...vs.realServers] }]),
  );
  for (const op of ops) {
    const key = virtualServerKey(op.vs);
    const vs = servers.get(key);
    switch (op.kind) {
      case "add-service":
        servers.set(key, { ...op.vs, realServers: [] });
        break;
      case "edit-service":
        if (vs) servers.set(key, { ...op.vs, realServers: vs.realServers });
        break;
      case "delete-service":
        servers.delete(key);
        break;
      case "add-real":
      case "edit-real":
        if (vs) {
          vs.realServers = vs.realServers.filter((rs) =>
            realServerKey(rs) !== realServerKey(op.rs)
          );
          vs.realServers.push({ ...op.rs });
        }
        break;
      case "delete-real":
        if (vs) {
          vs.realServers = vs.realServers.filter((rs) =>
            realServerKey(rs) !== realServerKey(op.rs)
          );
        }
        break;
    }
  }
  const sorted = [...servers.values()].sort((a, b) =>
    compare(virtualServerKey(a), virtualServerKey(b))
  );
  for (const vs of sorted) {
    vs.realServers.sort((a, b) => compare(realServerKey(a), realServerKey(b)));
  }
  return sorted;
}

function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
