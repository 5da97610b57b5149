/**
 * The one check of a network interface name, used wherever one reaches a
 * script or a command line: the config (`--pod-bridge-interface`,
 * `--pod-interface-name-prefix`), the renderers' local-traffic matches and
 * the command policy's `ip link` shapes.
 *
 * @module
 */

/**
 * 1 to 15 characters (Linux's IFNAMSIZ less its NUL) of letters, digits and
 * `_ . : @ -`, not starting with `-` (it would read as an option) and not `.`
 * or `..`.
 */
const INTERFACE_NAME = /^[A-Za-z0-9_.:@][A-Za-z0-9_.:@-]{0,14}$/;

/**
 * True when `name` is an interface name (or prefix) kproxy writes into
 * rules and commands.
 *
 * @example
 * ```ts
 * import { isInterfaceName } from "./interface_name.ts";
 * isInterfaceName("cbr0"); // true
 * isInterfaceName("eth0; reboot"); // false
 * ```
 */
export function isInterfaceName(name: string): boolean {
  return INTERFACE_NAME.test(name) && name !== "." && name !== "..";
}
