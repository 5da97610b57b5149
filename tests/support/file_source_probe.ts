/**
 * Runs a FileSource on the directory given as the first argument and prints
 * one line per event (`upsert Service ns/name`, `synced`, …), polling only
 * once an hour: a change seen within the test's wait came from `Deno.watchFs`.
 * For tests that run it under kproxy's own permission flags.
 *
 * @module
 */

import { FileSource } from "../../lib/shell/source/file.ts";

const dir = Deno.args[0];
if (dir === undefined) throw new Error("Cannot probe: no directory given");
const source = new FileSource({ dir, pollIntervalMs: 3_600_000, debounceMs: 20 });
await source.start((event) => {
  if (event.type === "synced") {
    console.log("synced");
    return;
  }
  const metadata = event.object.metadata as Record<string, string>;
  console.log(`${event.type} ${event.kind} ${metadata.namespace ?? ""}/${metadata.name}`);
}, new AbortController().signal);
