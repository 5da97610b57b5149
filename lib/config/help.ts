/**
 * The `--help` text: usage, then every flag grouped kube-proxy style with
 * its default.
 *
 * @module
 */

import type { Config } from "./types.ts";
import { defaultConfig } from "./defaults.ts";
import { ALL_FLAGS, type FlagSpec } from "./flags.ts";
import { formatDuration } from "./values.ts";

function getPath(config: Config, key: string): unknown {
  let value: unknown = config;
  for (const part of key.split(".")) value = (value as Record<string, unknown>)[part];
  return value;
}

function defaultText(spec: FlagSpec, defaults: Config): string {
  if (spec.defaultText !== undefined) return spec.defaultText;
  const value = getPath(defaults, spec.key!);
  if (spec.type === "duration") return formatDuration(value as number);
  if (Array.isArray(value)) return value.length === 0 ? "[]" : `[${value.join(",")}]`;
  if (value === "") return '""';
  return String(value);
}

function wrap(text: string, width: number): string[] {
  const lines: string[] = [];
  let line = "";
  for (const word of text.split(" ")) {
    if (line !== "" && line.length + 1 + word.length > width) {
      lines.push(line);
      line = word;
    } else {
      line = line === "" ? word : `${line} ${word}`;
    }
  }
  if (line !== "") lines.push(line);
  return lines;
}

/**
 * The `--help` text: usage, then every flag grouped kube-proxy style with its default.
 *
 * @returns Multi-line text ending in a newline.
 */
export function helpText(): string {
  const defaults = defaultConfig("");
  const out = [
    "kproxy: a drop-in replacement for kube-proxy. It watches Services and EndpointSlices",
    "and programs nftables, iptables, IPVS or Windows HNS so that Service traffic reaches",
    "its endpoints.",
    "",
    "Usage:",
    "  kproxy [flags]                          run the proxy",
    "  kproxy plan [flags]                     print the rules kproxy would install, and exit",
    "  kproxy diff [flags]                     show how the installed rules differ from the plan",
    "  kproxy demo [flags]                     run against the bundled demo manifests",
    "  kproxy explain DEST --from SRC [flags]  trace a packet to DEST (IP:port) through the plan",
    "  kproxy hand-back [flags]                once kube-proxy's rules are in, remove kproxy's own",
    "  kproxy --version | --help",
  ];
  const groups = [...new Set(ALL_FLAGS.map((flag) => flag.group))];
  for (const group of groups) {
    out.push("", `${group} flags:`, "");
    for (const spec of ALL_FLAGS.filter((flag) => flag.group === group)) {
      const short = spec.name === "v" ? "-v, " : spec.name === "help" ? "-h, " : "    ";
      const head = `  ${short}--${spec.name}${spec.type === "" ? "" : ` ${spec.type}`}`;
      const help = spec.group === "Accepted for compatibility, ignored"
        ? spec.help
        : `${spec.help} (default ${defaultText(spec, defaults)})`;
      const body = wrap(help, 100 - 40);
      const first = head.length < 38 ? head.padEnd(40) : `${head}\n${" ".repeat(40)}`;
      out.push(first + body[0], ...body.slice(1).map((line) => " ".repeat(40) + line));
    }
  }
  return out.join("\n") + "\n";
}
