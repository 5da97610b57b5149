/**
 * Runs a {@linkcode FakeApiServer} over HTTPS as its own process, holding the
 * objects of a manifests directory, so a test can start it inside a network
 * namespace (`ip netns exec NS deno run … serve_fake_apiserver.ts`) where an
 * in-process server cannot listen. Prints the port on the first line of
 * stdout, then serves until stdin closes.
 *
 * Usage: serve_fake_apiserver.ts --manifests DIR --cert FILE --key FILE
 *
 * @module
 */

import { parseArgs } from "node:util";
import { parseAllDocuments } from "yaml";
import {
  type ApiObject,
  FakeApiServer,
  type Resource,
} from "../../scripts/testbed/fake_apiserver.ts";

const RESOURCES: Readonly<Record<string, Resource>> = {
  Service: "services",
  EndpointSlice: "endpointslices",
  Node: "nodes",
  ServiceCIDR: "servicecidrs",
};

/** The objects of every `.yaml` file in `dir` the fake serves, by resource. */
export async function manifestObjects(
  dir: string,
): Promise<{ resource: Resource; object: ApiObject }[]> {
  const names: string[] = [];
  for await (const entry of Deno.readDir(dir)) {
    if (entry.isFile && entry.name.endsWith(".yaml")) names.push(entry.name);
  }
  const objects: { resource: Resource; object: ApiObject }[] = [];
  for (const name of names.sort()) {
    for (const doc of parseAllDocuments(await Deno.readTextFile(`${dir}/${name}`))) {
      const object = doc.toJS() as ApiObject | null;
      const resource = object ? RESOURCES[object.kind] : undefined;
      if (object && resource) objects.push({ resource, object });
    }
  }
  return objects;
}

if (import.meta.main) {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      manifests: { type: "string" },
      cert: { type: "string" },
      key: { type: "string" },
    },
  });
  const server = await FakeApiServer.start({
    tls: {
      cert: await Deno.readTextFile(values.cert!),
      key: await Deno.readTextFile(values.key!),
      ca: "",
    },
  });
  for (const { resource, object } of await manifestObjects(values.manifests!)) {
    server.upsert(resource, object);
  }
  console.log(server.port);
  for await (const _ of Deno.stdin.readable) {
    // Serve until the test closes stdin.
  }
  await server.stop();
}
