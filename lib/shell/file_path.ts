/**
 * The three path operations kproxy needs for the files a kubeconfig names:
 * `isAbsolute`, `dirname` and `join`, with `node:path`'s results on POSIX and
 * on Windows (drive letters, either slash). Written here so that reading a
 * kubeconfig does not start Deno's Node compatibility layer.
 *
 * @module
 */

/** Which platform's rules apply. @default {Deno.build.os === "windows"} */
export type PathFlavour = "posix" | "windows";

const here = (): PathFlavour => Deno.build.os === "windows" ? "windows" : "posix";

const DRIVE = /^[a-zA-Z]:/;

function isSeparator(char: string | undefined, flavour: PathFlavour): boolean {
  return char === "/" || (flavour === "windows" && char === "\\");
}

/** The root a path starts with, as written: "/", "\\", "C:", "C:\\", "C:/" or "". */
function rootOf(path: string, flavour: PathFlavour): string {
  if (flavour === "posix") return path.startsWith("/") ? "/" : "";
  const drive = DRIVE.test(path) ? path.slice(0, 2) : "";
  return isSeparator(path[drive.length], flavour) ? path.slice(0, drive.length + 1) : drive;
}

/** Whether `path` starts at a root (as `node:path`'s `isAbsolute`). */
export function isAbsolute(path: string, flavour: PathFlavour = here()): boolean {
  if (flavour === "posix") return path.startsWith("/");
  return isSeparator(path[0], flavour) || (DRIVE.test(path) && isSeparator(path[2], flavour));
}

/** `path` without its last segment (as `node:path`'s `dirname`). */
export function dirname(path: string, flavour: PathFlavour = here()): string {
  const root = rootOf(path, flavour);
  let inSegment = false;
  for (let index = path.length - 1; index >= root.length; index--) {
    if (!isSeparator(path[index], flavour)) inSegment = true;
    else if (inSegment) return index === 0 ? path.slice(0, 1) : path.slice(0, index);
  }
  if (root === "") return ".";
  return flavour === "windows" ? root : "/";
}

/** The segments joined and normalized: `.` dropped, `..` applied (as `node:path`'s `join`). */
export function join(...segments: string[]): string {
  return joinAs(here(), ...segments);
}

/** {@linkcode join} by the rules of `flavour`. */
export function joinAs(flavour: PathFlavour, ...segments: string[]): string {
  const joined = segments.filter((segment) => segment !== "").join("/");
  if (joined === "") return ".";
  const written = rootOf(joined, flavour);
  const root = flavour === "windows" ? written.replace("/", "\\") : written;
  const separator = flavour === "windows" ? "\\" : "/";
  const absolute = isSeparator(written.at(-1), flavour);
  const parts: string[] = [];
  for (const part of joined.slice(root.length).split(flavour === "windows" ? /[\\/]/ : "/")) {
    if (part === "" || part === ".") continue;
    if (part === ".." && parts.length > 0 && parts.at(-1) !== "..") parts.pop();
    else if (part !== ".." || !absolute) parts.push(part);
  }
  const trailing = isSeparator(joined.at(-1), flavour) && parts.length > 0 ? separator : "";
  const body = parts.join(separator) + trailing;
  if (root === "" && body === "") return ".";
  return `${root}${body}` || root;
}
