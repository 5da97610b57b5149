/**
 * kproxy: a Kubernetes service proxy, a drop-in replacement for kube-proxy.
 *
 * ```sh
 * kproxy --proxy-mode=nftables --kubeconfig=/var/lib/kproxy/kubeconfig
 * kproxy plan --manifests scripts/manifests --hostname-override node-a
 * ```
 *
 * @module
 */

import { main } from "./lib/commands/app.ts";

export { main };

/**
 * The kernel demo, imported only when `kproxy demo` runs: a computed
 * specifier keeps it (and its network-namespace helpers) out of bundles.
 */
function loadDemo(): Promise<Record<string, unknown>> {
  const specifier = new URL("./scripts/demo.ts", import.meta.url).href;
  return import(specifier);
}

if (import.meta.main) {
  Deno.exit(await main(Deno.args, { loadDemo }));
}
