/**
 * Resident memory of a process by kind of mapping, read from its
 * `/proc/PID/smaps` text: the profilers' one reading of it.
 *
 * @module
 */

/** Kinds of mapping {@linkcode residentByKind} sums. */
export type MappingKind = "anonymous" | "malloc" | "binary" | "other";

/**
 * Resident MiB per {@linkcode MappingKind}, plus `total`: anonymous mappings,
 * glibc's `[heap]`, the executable `binary` (its path), everything else.
 */
export function residentByKind(
  smaps: string,
  binary: string,
): Record<MappingKind | "total", number> {
  const kinds = { total: 0, anonymous: 0, malloc: 0, binary: 0, other: 0 };
  let kind: MappingKind = "other";
  for (const line of smaps.split("\n")) {
    const header = /^[0-9a-f]+-[0-9a-f]+ \S+ \S+ \S+ \S+\s*(.*)$/.exec(line);
    if (header) {
      const path = header[1]!.trim();
      kind = path === ""
        ? "anonymous"
        : path === "[heap]"
        ? "malloc"
        : path === binary
        ? "binary"
        : "other";
      continue;
    }
    const rss = /^Rss:\s+(\d+) kB/.exec(line);
    if (rss) {
      kinds[kind] += Number(rss[1]) / 1024;
      kinds.total += Number(rss[1]) / 1024;
    }
  }
  return kinds;
}
