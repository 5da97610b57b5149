/**
 * A fake apiserver serving a synthetic cluster, as its own process, so a
 * kproxy process in a bench network namespace can reach it on the
 * namespace's 127.0.0.1 (run both under `ip netns exec`). Writes a
 * kubeconfig, times one paged list of everything, prints
 * `ready <port> <list ms>` and serves until stdin closes. With `--tls` it
 * serves HTTPS, as a real apiserver does, with a fresh CA the kubeconfig
 * names. A line `slice <index> <generation>` on stdin moves endpoint 0 of
 * service `index` to that generation (an EndpointSlice update).
 *
 * ```sh
 * ip netns exec kp-b-x deno run --allow-all scripts/bench/apiserver.ts \
 *   --services=10000 --endpoints=10 --objects=realistic --kubeconfig=/tmp/kp-b-x.kubeconfig
 * ```
 *
 * @module
 */

import { parseArgs } from "node:util";
import { FakeApiServer, RESOURCE_PATHS, writeKubeconfig } from "../testbed/fake_apiserver.ts";
import { testCertificates } from "../testbed/tls.ts";
import { fillCluster, OBJECT_SHAPES, type ObjectShape, sliceObject } from "./cluster.ts";

/**
 * Milliseconds to list Services and EndpointSlices in pages of 500, as
 * kproxy's source does: the floor of any start-up against this server.
 */
async function timePagedLists(server: FakeApiServer): Promise<number> {
  const ca = server.certificateAuthority;
  const client = ca ? Deno.createHttpClient({ caCerts: [ca] }) : undefined;
  const start = performance.now();
  for (const path of [RESOURCE_PATHS.services, RESOURCE_PATHS.endpointslices]) {
    let token = "";
    do {
      const query = new URLSearchParams({ limit: "500" });
      if (token !== "") query.set("continue", token);
      const response = await fetch(`${server.url}${path}?${query}`, { client });
      const page = await response.json();
      token = page.metadata?.continue ?? "";
    } while (token !== "");
  }
  client?.close();
  return performance.now() - start;
}

if (import.meta.main) {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      services: { type: "string", default: "1000" },
      endpoints: { type: "string", default: "10" },
      objects: { type: "string", default: "realistic" },
      tls: { type: "boolean", default: false },
      kubeconfig: { type: "string" },
    },
  });
  const shape = values.objects as ObjectShape;
  if (!OBJECT_SHAPES.includes(shape)) {
    throw new Error(`Cannot parse --objects ${shape}: want one of ${OBJECT_SHAPES.join(", ")}`);
  }
  const tls = values.tls ? await testCertificates() : undefined;
  if (values.tls && tls === undefined) throw new Error("Cannot serve HTTPS: openssl is missing");
  const server = await FakeApiServer.start({ tls });
  fillCluster(server, {
    services: Number(values.services),
    endpointsPerService: Number(values.endpoints),
    shape,
  });
  await writeKubeconfig(server, values.kubeconfig);
  console.log(`ready ${server.port} ${(await timePagedLists(server)).toFixed(0)}`);
  let buffer = "";
  for await (const chunk of Deno.stdin.readable.pipeThrough(new TextDecoderStream())) {
    buffer += chunk;
    const lines = buffer.split("\n");
    buffer = lines.pop() ?? "";
    for (const line of lines) {
      const [command, index, generation] = line.trim().split(" ");
      if (command !== "slice") continue;
      server.upsert(
        "endpointslices",
        sliceObject(Number(index), Number(values.endpoints), Number(generation), shape),
      );
    }
  }
  await server.stop();
}
