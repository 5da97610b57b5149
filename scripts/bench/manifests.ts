/**
 * Manifests loading: `kproxy plan --manifests DIR` (as `deno task plan` runs it)
 * on the bench cluster dumped into one file: as multi-document YAML, and as
 * `kubectl get -o yaml` and `-o json` print it (`kind: List`; YAML sequences
 * not indented, JSON indented by four spaces). Realistic objects lose their
 * managedFields, as `kubectl get` hides them by default. Each run
 * is a fresh process, timed from spawn to exit; peak RSS is the child's
 * `ru_maxrss` (python3 `getrusage(RUSAGE_CHILDREN)`). Medians of the runs. With
 * `before`, the same loads run in another checkout (the code before a change)
 * and are reported beside.
 *
 * @module
 */

import { dump } from "js-yaml";
import { type ClusterSize, type ObjectShape, serviceObject, sliceObject } from "./cluster.ts";

const ROOT = new URL("../../", import.meta.url).pathname;

/** The formats a dump is written in. */
export type DumpFormat = "yaml" | "yaml-list" | "json";

/** Time and memory of one loader. */
export interface LoadFigures {
  /** Median seconds from spawn to exit. */
  seconds: number;
  /** Median peak RSS in MiB. */
  peakMiB: number;
}

/** One dump loaded by `kproxy plan`. */
export interface ManifestsRow extends LoadFigures {
  format: DumpFormat;
  services: number;
  endpointsPerService: number;
  /** Shape of the dumped objects; absent in runs before 2026-11-26 (minimal). */
  shape?: ObjectShape;
  /** Size of the dump file. */
  bytes: number;
  runs: number;
  /** The same load by the checkout given as `before`, when measured. */
  before?: LoadFigures & { checkout: string };
}

/** An object as `kubectl get` prints it: without managedFields. */
function asKubectlPrints(object: Record<string, any>): Record<string, unknown> {
  const { managedFields: _, ...metadata } = object.metadata;
  return { ...object, metadata };
}

function dumpObjects(size: ClusterSize): Record<string, unknown>[] {
  const shape = size.shape ?? "realistic";
  const objects: Record<string, unknown>[] = [{
    apiVersion: "v1",
    kind: "Node",
    metadata: { name: "node-a", labels: { "kubernetes.io/hostname": "node-a" } },
    spec: { podCIDRs: ["10.244.1.0/24"] },
    status: { addresses: [{ type: "InternalIP", address: "10.201.0.1" }] },
  }];
  for (let i = 0; i < size.services; i++) {
    objects.push({
      apiVersion: "v1",
      kind: "Service",
      ...asKubectlPrints(serviceObject(i, shape)),
    });
    objects.push({
      apiVersion: "discovery.k8s.io/v1",
      kind: "EndpointSlice",
      ...asKubectlPrints(sliceObject(i, size.endpointsPerService, 0, shape)),
    });
  }
  return objects;
}

/** Writes the bench cluster as one manifest file in `dir`; returns its size in bytes. */
export async function writeDump(dir: string, size: ClusterSize, format: DumpFormat) {
  const objects = dumpObjects(size);
  const list = {
    apiVersion: "v1",
    items: objects,
    kind: "List",
    metadata: { resourceVersion: "" },
  };
  const text = format === "json"
    ? JSON.stringify(list, null, 4)
    : format === "yaml-list"
    ? dump(list, { seqNoIndent: true })
    : objects.map((object) => dump(object)).join("---\n");
  await Deno.writeTextFile(`${dir}/dump.${format === "json" ? "json" : "yaml"}`, text);
  return new TextEncoder().encode(text).length;
}

/**
 * Runs a command, output discarded; returns its wall seconds and peak RSS in
 * KiB. Fails when kproxy refused the dump (it then prints an empty plan).
 */
const MEASURE = `
import resource, subprocess, sys, time
start = time.monotonic()
done = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
wall = time.monotonic() - start
if done.returncode != 0 or b"Refusing manifest" in done.stderr:
    sys.stderr.write(done.stderr.decode(errors="replace")[-2000:])
    sys.exit(done.returncode or 3)
print(wall, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
`;

async function loadOnce(checkout: string, dir: string): Promise<LoadFigures> {
  const output = await new Deno.Command("python3", {
    args: [
      "-c",
      MEASURE,
      Deno.execPath(),
      "run",
      "--allow-read",
      "--allow-env",
      "--ignore-env",
      `${checkout}/main.ts`,
      "plan",
      "--manifests",
      dir,
      "--hostname-override",
      "node-a",
    ],
    cwd: checkout,
    env: { NO_COLOR: "1", RUST_BACKTRACE: "0" },
    stdout: "piped",
    stderr: "piped",
  }).output();
  if (!output.success) {
    throw new Error(
      `kproxy plan failed in ${checkout}: ${new TextDecoder().decode(output.stderr)}`,
    );
  }
  const [wall, maxrssKiB] = new TextDecoder().decode(output.stdout).trim().split(" ").map(Number);
  return { seconds: wall!, peakMiB: maxrssKiB! / 1024 };
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2;
}

async function loads(checkout: string, dir: string, runs: number): Promise<LoadFigures> {
  const figures: LoadFigures[] = [];
  for (let i = 0; i < runs; i++) figures.push(await loadOnce(checkout, dir));
  return {
    seconds: median(figures.map((f) => f.seconds)),
    peakMiB: median(figures.map((f) => f.peakMiB)),
  };
}

/** Every {@linkcode DumpFormat}. */
export const DUMP_FORMATS: readonly DumpFormat[] = ["yaml", "yaml-list", "json"];

/** Measures `kproxy plan` on a dump of `size` in each format. */
export async function benchManifests(options: {
  size: ClusterSize;
  runs: number;
  /** Another checkout of kproxy to measure the same loads with. */
  before?: string;
  /** @default {DUMP_FORMATS} */
  formats?: readonly DumpFormat[];
}): Promise<ManifestsRow[]> {
  const rows: ManifestsRow[] = [];
  for (const format of options.formats ?? DUMP_FORMATS) {
    const dir = await Deno.makeTempDir({ prefix: "kp-bench-manifests-" });
    try {
      const bytes = await writeDump(dir, options.size, format);
      const after = await loads(ROOT, dir, options.runs);
      const row: ManifestsRow = {
        format,
        services: options.size.services,
        endpointsPerService: options.size.endpointsPerService,
        shape: options.size.shape ?? "realistic",
        bytes,
        runs: options.runs,
        ...after,
      };
      if (options.before) {
        row.before = {
          checkout: options.before,
          ...await loads(options.before, dir, options.runs),
        };
      }
      rows.push(row);
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  }
  return rows;
}
