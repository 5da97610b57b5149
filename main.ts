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

if (import.meta.main) {
  Deno.exit(await main(Deno.args));
}
