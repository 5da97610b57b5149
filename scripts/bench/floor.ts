/**
 * The memory and start-up floor of kproxy: a Deno process that loads
 * `@kubernetes/client-node` (as kproxy's apiserver source does) and a
 * KubeConfig, prints `ready` and waits until stdin closes.
 *
 * @module
 */

import { KubeConfig } from "@kubernetes/client-node";

if (import.meta.main) {
  new KubeConfig();
  console.log("ready");
  for await (const _ of Deno.stdin.readable) {
    // Stay alive until the parent closes stdin.
  }
}
