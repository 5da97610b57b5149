/**
 * Kernel parameters, read and written by running `sysctl` through the
 * Executor (Deno refuses direct /proc/sys access under narrow permissions).
 *
 * @module
 */

import { runChecked } from "./exec.ts";
import type { Executor } from "../core/executor.ts";

const KEY = /^[a-z0-9_]+(?:[./][a-zA-Z0-9_-]+)+$/;
const VALUE = /^[a-zA-Z0-9_. -]{1,64}$/;

/** Throws a TypeError unless `key` looks like a sysctl name (e.g. `net.ipv4.ip_forward`). */
function validateSysctlKey(key: string): void {
  if (!KEY.test(key) || key.includes("..")) {
    throw new TypeError(`Cannot use sysctl key "${key}": not a dotted kernel parameter name`);
  }
}

function validateSysctlValue(key: string, value: string): void {
  if (!VALUE.test(value) || value.trim() !== value) {
    throw new TypeError(`Cannot set sysctl "${key}" to "${value}": not a plain value`);
  }
}

/**
 * Sets kernel parameters with `sysctl -w key=value`, one command per entry,
 * after validating every key and value.
 *
 * @throws {TypeError} on an invalid key or value, before anything runs
 * @throws {CommandError} when sysctl fails
 */
export async function setSysctls(
  executor: Executor,
  entries: Record<string, string>,
): Promise<void> {
  const pairs = Object.entries(entries);
  for (const [key, value] of pairs) {
    validateSysctlKey(key);
    validateSysctlValue(key, value);
  }
  for (const [key, value] of pairs) {
    await runChecked(executor, { program: "sysctl", args: ["-w", `${key}=${value}`] });
  }
}

/**
 * Reads one kernel parameter with `sysctl -n key`.
 *
 * @returns the value with surrounding whitespace removed
 */
export async function readSysctl(executor: Executor, key: string): Promise<string> {
  validateSysctlKey(key);
  const result = await runChecked(executor, { program: "sysctl", args: ["-n", key] });
  return result.stdout.trim();
}
