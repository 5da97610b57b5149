/**
 * Peak RSS and start-up of kproxy processes, A against B: the start-up
 * bench (`benchProcess`: a fresh namespace, the fake apiserver serving
 * realistic objects over HTTPS, kproxy's real `main.ts`) run for each
 * entry point in turn, A B A B …, so both see the same machine load. Prints
 * one line per run and the medians.
 *
 * ```sh
 * deno run --allow-all scripts/bench/peak.ts --mode=iptables --services=1000 --runs=3 \
 *   --a=main.ts --b=/tmp/kp-before/main.ts
 * ```
 *
 * @module
 */

import { parseArgs } from "node:util";
import { resolve } from "node:path";
import { median } from "./harness.ts";
import { benchProcess, type ProcessRow } from "./process.ts";

if (import.meta.main) {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      mode: { type: "string", default: "iptables" },
      services: { type: "string", default: "1000" },
      endpoints: { type: "string", default: "10" },
      runs: { type: "string", default: "3" },
      a: { type: "string", default: "main.ts" },
      b: { type: "string" },
      "a-v8-flags": { type: "string" },
      "b-v8-flags": { type: "string" },
    },
  });
  const mode = values.mode as "nftables" | "iptables";
  const flags = (text: string | undefined) =>
    text === undefined ? undefined : text.split(",").filter((flag) => flag !== "");
  const variants = [
    { main: values.a, v8Flags: flags(values["a-v8-flags"]) },
    ...values.b !== undefined || values["b-v8-flags"] !== undefined
      ? [{ main: values.b ?? values.a, v8Flags: flags(values["b-v8-flags"]) }]
      : [],
  ].map((variant, i) => ({
    ...variant,
    main: resolve(variant.main),
    name: `${"AB"[i]} ${resolve(variant.main)}${
      variant.v8Flags ? ` [${variant.v8Flags.join(",")}]` : ""
    }`,
  }));
  const rows = new Map<string, ProcessRow[]>(variants.map((variant) => [variant.name, []]));
  for (let run = 0; run < Number(values.runs); run++) {
    for (const { name: entry, main, v8Flags } of variants) {
      const row = await benchProcess({
        mode,
        size: { services: Number(values.services), endpointsPerService: Number(values.endpoints) },
        main,
        v8Flags,
      });
      rows.get(entry)!.push(row);
      console.log(
        `${entry}: first sync ${(row.startupMs / 1000).toFixed(2)} s, lists ${
          ((row.listedMs ?? NaN) / 1000).toFixed(2)
        } s, peak ${row.peakRssMiB.toFixed(0)} MiB (at lists ${
          row.peakAtListedMiB?.toFixed(0)
        }), RSS after ${row.rssMiB.toFixed(0)} MiB, load ${Deno.loadavg()[0]!.toFixed(1)}`,
      );
    }
  }
  for (const [entry, runs] of rows) {
    console.log(
      `${entry}: medians: first sync ${
        (median(runs.map((r) => r.startupMs)) / 1000).toFixed(2)
      } s, peak ${median(runs.map((r) => r.peakRssMiB)).toFixed(0)} MiB (${
        runs.map((r) => r.peakRssMiB.toFixed(0)).join(" ")
      }), RSS after ${median(runs.map((r) => r.rssMiB)).toFixed(0)} MiB`,
    );
  }
}
