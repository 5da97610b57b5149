/**
 * The memory and start-up floor of kproxy: a Deno process that loads the
 * modules a kproxy process in nftables mode loads (the app, the backends and
 * the apiserver source), prints `ready` and waits until stdin closes.
 *
 * @module
 */

import "../../lib/commands/app.ts";
import "../../lib/shell/source/kube.ts";
import "../../backends/registry.ts";

if (import.meta.main) {
  console.log("ready");
  for await (const _ of Deno.stdin.readable) {
    // Stay alive until the parent closes stdin.
  }
}
