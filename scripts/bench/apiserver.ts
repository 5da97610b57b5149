/**
 * A fake apiserver serving a synthetic cluster, as its own process, so a
 * kproxy process in a bench network namespace can reach it on the
 * namespace's 127.0.0.1 (run both under `ip netns exec`). Writes a
 * kubeconfig, times one paged list of everything, prints
 * `ready <port> <list ms>` and serves until stdin closes.
 *
 * ```sh
 * ip netns exec kp-b-x deno run --allow-all scripts/bench/apiserver.ts \
 *   --services=10000 --endpoints=10 --kubeconfig=/tmp/kp-b-x.kubeconfig
 * ```
 *
 * @module
 */

import { parseArgs } from "node:util";
import { FakeApiServer, RESOURCE_PATHS, writeKubeconfig } from "../testbed/fake_apiserver.ts";
import { fillCluster } from "./cluster.ts";

/**
 * Milliseconds to list Services and EndpointSlices in pages of 500, as
 * kproxy's source does: the floor of any start-up against this server.
 */
async function timePagedLists(base: string): Promise<number> {
  const start = performance.now();
  for (const path of [RESOURCE_PATHS.services, RESOURCE_PATHS.endpointslices]) {
    let token = "";
    do {
      const query = new URLSearchParams({ limit: "500" });
      if (token !== "") query.set("continue", token);
      const page = await (await fetch(`${base}${path}?${query}`)).json();
      token = page.metadata?.continue ?? "";
    } while (token !== "");
  }
  return performance.now() - start;
}

if (import.meta.main) {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      services: { type: "string", default: "1000" },
      endpoints: { type: "string", default: "10" },
      kubeconfig: { type: "string" },
    },
  });
  const server = await FakeApiServer.start();
  fillCluster(server, {
    services: Number(values.services),
    endpointsPerService: Number(values.endpoints),
  });
  await writeKubeconfig(server, values.kubeconfig);
  console.log(`ready ${server.port} ${(await timePagedLists(server.url)).toFixed(0)}`);
  for await (const _ of Deno.stdin.readable) {
    // Serve until the parent closes stdin.
  }
  await server.stop();
}
