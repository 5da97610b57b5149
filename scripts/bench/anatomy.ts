/**
 * Bytes per service in each of kproxy's structures, and milliseconds per
 * phase, measured in one process (`--expose-gc`; heap deltas after full
 * collections): the JSON a list serves, the objects `JSON.parse` makes of it,
 * what the apiserver source keeps per object, the tracker's validated state,
 * the Plan of both families, and the nftables render of a full sync. The
 * figures the next optimisation works from (docs/BENCHMARKS.md, "Profile and
 * next steps").
 *
 * ```sh
 * deno run --allow-all --v8-flags=--expose-gc scripts/bench/anatomy.ts --services=10000
 * ```
 *
 * @module
 */

import { parseArgs } from "node:util";
import { FakeApiServer, writeKubeconfig } from "../testbed/fake_apiserver.ts";
import { KubeSource } from "../../lib/shell/source/kube.ts";
import { Tracker } from "../../lib/core/tracker.ts";
import { planNode } from "../../lib/core/planner.ts";
import { plannerOptionsFrom } from "../../lib/commands/app.ts";
import { defaultConfig } from "../../lib/config/defaults.ts";
import { renderFull } from "../../backends/nftables/render.ts";
import {
  fillCluster,
  OBJECT_SHAPES,
  type ObjectShape,
  serviceObject,
  sliceObject,
} from "./cluster.ts";

/** One structure or phase: its retained heap and the time it took. */
export interface AnatomyRow {
  name: string;
  /** V8 heap retained after a full GC, bytes. */
  bytes: number;
  ms: number;
}

const gc = (globalThis as { gc?: () => void }).gc;

function heapAfterGc(): number {
  if (!gc) throw new Error("Cannot measure retained heap: run with --v8-flags=--expose-gc");
  gc();
  gc();
  return Deno.memoryUsage().heapUsed;
}

/** Measures `make`'s retained heap and time; returns what it made, so it stays alive. */
function measure<T>(rows: AnatomyRow[], name: string, make: () => T): T {
  const before = heapAfterGc();
  const start = performance.now();
  const value = make();
  const ms = performance.now() - start;
  rows.push({ name, bytes: heapAfterGc() - before, ms });
  return value;
}

async function measureAsync<T>(
  rows: AnatomyRow[],
  name: string,
  make: () => Promise<T>,
): Promise<T> {
  const before = heapAfterGc();
  const start = performance.now();
  const value = await make();
  const ms = performance.now() - start;
  rows.push({ name, bytes: heapAfterGc() - before, ms });
  return value;
}

/** Runs every measurement for `services` services of `shape`. */
export async function anatomy(
  options: { services: number; endpointsPerService: number; shape: ObjectShape },
): Promise<{ rows: AnatomyRow[]; jsonBytes: { service: number; slice: number } }> {
  const { services, endpointsPerService, shape } = options;
  const rows: AnatomyRow[] = [];
  const jsonBytes = {
    service: JSON.stringify(serviceObject(1, shape)).length,
    slice: JSON.stringify(sliceObject(1, endpointsPerService, 0, shape)).length,
  };

  // What a client holding every listed object (an informer's cache) would keep.
  const pages = [] as string[];
  for (let start = 0; start < services; start += 500) {
    const items = [];
    for (let i = start; i < Math.min(services, start + 500); i++) {
      items.push(JSON.stringify(sliceObject(i, endpointsPerService, 0, shape)));
    }
    pages.push(`{"items":[${items.join(",")}]}`);
  }
  const parsed = measure(
    rows,
    "EndpointSlices as JSON.parse makes them (all pages kept)",
    () => pages.map((page) => JSON.parse(page)),
  );
  parsed.length = 0;
  pages.length = 0;

  const server = await FakeApiServer.start();
  fillCluster(server, { services, endpointsPerService, shape });
  const kubeconfig = await writeKubeconfig(server);
  try {
    // The source alone: its stubs of every object, with a listener that drops the events.
    const controller = new AbortController();
    let running: Promise<void> | undefined;
    await measureAsync(rows, "apiserver source: list everything (stubs kept per object)", () => {
      const synced = Promise.withResolvers<void>();
      const source = new KubeSource({ kubeconfig, master: "", nodeName: "node-a" });
      running = source.start((event) => {
        if (event.type === "synced") synced.resolve();
      }, controller.signal);
      return synced.promise;
    });
    controller.abort();
    await running;

    // The tracker fed the objects as the source hands them over: each one fresh from
    // JSON.parse, so that no string is shared unless kproxy shares it.
    const fresh = (object: unknown) => JSON.parse(JSON.stringify(object));
    const objects = server.list("services").map((object) => ({ kind: "Service", object }));
    const slices = server.list("endpointslices").map((object) => ({
      kind: "EndpointSlice",
      object,
    }));
    const nodes = server.list("nodes").map((object) => ({ kind: "Node", object }));
    const tracker = measure(rows, "tracker: validated Services and EndpointSlices", () => {
      const tracker = new Tracker({ nodeName: "node-a", clock: { now: () => performance.now() } });
      for (const { object } of nodes) tracker.apply({ type: "upsert", kind: "Node", object });
      for (const { object } of objects) {
        tracker.apply({ type: "upsert", kind: "Service", object: fresh(object) });
      }
      for (const { object } of slices) {
        tracker.apply({ type: "upsert", kind: "EndpointSlice", object: fresh(object) });
      }
      tracker.apply({ type: "synced" });
      return tracker;
    });
    objects.length = 0;
    slices.length = 0;
    const state = tracker.drain().state;
    const config = defaultConfig("node-a");
    config.clusterCIDRs = ["10.244.0.0/16"];
    const plans = measure(
      rows,
      "plan: both families",
      () => planNode({ state, options: plannerOptionsFrom(config, ["10.201.0.1"]) }),
    );
    const tx = measure(
      rows,
      "nftables full render (transaction, until nft has read it)",
      () => renderFull(plans.ipv4),
    );
    let scriptBytes = 0;
    for (const chunk of tx.chunks()) scriptBytes += chunk.length;
    rows.push({ name: `nftables full script: ${scriptBytes} bytes`, bytes: scriptBytes, ms: 0 });
  } finally {
    await server.stop();
    await Deno.remove(kubeconfig);
  }
  return { rows, jsonBytes };
}

if (import.meta.main) {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      services: { type: "string", default: "10000" },
      endpoints: { type: "string", default: "10" },
      objects: { type: "string", default: "realistic" },
    },
  });
  const shape = values.objects as ObjectShape;
  if (!OBJECT_SHAPES.includes(shape)) throw new Error(`Cannot parse --objects ${shape}`);
  const services = Number(values.services);
  const { rows, jsonBytes } = await anatomy({
    services,
    endpointsPerService: Number(values.endpoints),
    shape,
  });
  console.log(
    `${services} services × ${values.endpoints}, ${shape} objects: ` +
      `JSON ${jsonBytes.service} B per Service, ${jsonBytes.slice} B per EndpointSlice`,
  );
  console.log("   MiB  bytes/service       ms  structure or phase");
  for (const row of rows) {
    console.log(
      `${(row.bytes / 1024 / 1024).toFixed(1).padStart(6)} ${
        (row.bytes / services).toFixed(0).padStart(14)
      } ${row.ms.toFixed(0).padStart(8)}  ${row.name}`,
    );
  }
}
