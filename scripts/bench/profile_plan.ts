/**
 * Where `kproxy plan --manifests DIR` spends its time on a dump of the bench
 * cluster (the manifests section's 10k × 10 target is 2 s): writes the dump
 * in one format, runs `main(["plan", …])` in this process under V8's CPU
 * profiler with the plan written to /dev/null, and prints the CPU self time
 * by file and by function, and the wall time of the run.
 *
 * ```sh
 * deno run --allow-all scripts/bench/profile_plan.ts --services=10000 --format=json
 * ```
 *
 * @module
 */

import inspector from "node:inspector";
import { parseArgs } from "node:util";
import { main } from "../../lib/commands/app.ts";
import { type DumpFormat, writeDump } from "./manifests.ts";
import { OBJECT_SHAPES, type ObjectShape } from "./cluster.ts";
import { codeOrigin, selfTime } from "./profile.ts";

function post<T>(session: inspector.Session, method: string, params: object = {}): Promise<T> {
  return new Promise((resolve, reject) =>
    session.post(method, params, (error, result) => error ? reject(error) : resolve(result as T))
  );
}

function top(totals: Map<string, number>, count: number): string {
  const all = [...totals.values()].reduce((a, b) => a + b, 0);
  return [...totals].sort((a, b) => b[1] - a[1]).slice(0, count).map(([key, ms]) =>
    `${ms.toFixed(0).padStart(7)} ms ${(100 * ms / all).toFixed(1).padStart(5)}%  ${key}`
  ).join("\n");
}

if (import.meta.main) {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      services: { type: "string", default: "10000" },
      format: { type: "string", default: "json" },
      objects: { type: "string", default: "realistic" },
    },
  });
  const shape = values.objects as ObjectShape;
  if (!OBJECT_SHAPES.includes(shape)) throw new Error(`Cannot parse --objects ${shape}`);
  const dir = await Deno.makeTempDir({ prefix: "kp-bench-plan-" });
  const sink = await Deno.open("/dev/null", { write: true });
  const encoder = new TextEncoder();
  try {
    const bytes = await writeDump(
      dir,
      { services: Number(values.services), endpointsPerService: 10, shape },
      values.format as DumpFormat,
    );
    const session = new inspector.Session();
    session.connect();
    await post(session, "Profiler.enable");
    await post(session, "Profiler.start");
    const start = performance.now();
    const code = await main(["plan", "--manifests", dir, "--hostname-override", "node-a"], {
      io: {
        stdout: (text) => void sink.writeSync(encoder.encode(text)),
        stderr: (text) => void Deno.stderr.writeSync(encoder.encode(text)),
      },
    });
    const wallMs = performance.now() - start;
    const { profile } = await post<{ profile: Parameters<typeof selfTime>[0] }>(
      session,
      "Profiler.stop",
    );
    console.log(
      `kproxy plan on a ${values.format} dump of ${values.services} services (${
        (bytes / 1e6).toFixed(1)
      } MB, ${shape}): exit ${code}, ${(wallMs / 1000).toFixed(2)} s in process`,
    );
    console.log("\nCPU self time by file:");
    console.log(top(selfTime(profile, (f) => codeOrigin(f.url, f.functionName)), 15));
    console.log("\nCPU self time by function:");
    console.log(
      top(
        selfTime(
          profile,
          (f) => `${f.functionName || "(anonymous)"} ${codeOrigin(f.url, "")}:${f.lineNumber + 1}`,
        ),
        25,
      ),
    );
  } finally {
    sink.close();
    await Deno.remove(dir, { recursive: true });
  }
}
