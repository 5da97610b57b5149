/**
 * kube-proxy-compatible configuration: the command line (kube-proxy's flag
 * names plus kproxy's own) and the KubeProxyConfiguration file
 * (kubeproxy.config.k8s.io/v1alpha1), merged into a validated {@linkcode Config}
 * with flags given on the command line winning over the file.
 *
 * Pure: the file system and the host name come through
 * {@linkcode ConfigEnvironment}.
 *
 * @module
 */

import type { Config } from "./types.ts";
import { defaultConfig } from "./defaults.ts";
import { applyConfigFile } from "./file.ts";
import { flagLabel, FLAGS_BY_NAME, type FlagSpec, tokenize } from "./flags.ts";
import { validate } from "./validate.ts";
import { ConfigError, type Origins, quote, toInt, toIP } from "./values.ts";
import { resolveFeatureGates } from "./gates.ts";

/** What {@linkcode parseCommandLine} needs from the outside world. */
export interface ConfigEnvironment {
  /** Reads a whole text file; throws when it cannot. */
  readTextFile(path: string): string;
  /** The host's name, the default node name. */
  hostname(): string;
}

/** A subcommand of kproxy. */
export type Command =
  | "run"
  | "plan"
  | "demo"
  | "explain"
  | "diff"
  | "hand-back"
  | "init-only"
  | "version"
  | "help";

/** The parsed command line. */
export interface CommandLine {
  command: Command;
  config: Config;
  /** Positional arguments after the subcommand, e.g. explain's DEST. */
  args: string[];
  /** `--from` and `--node` of `explain` (node defaults to the node name); only for that command. */
  explain?: { from: string; node: string };
  /** Names of the flags given on the command line, without dashes, in order of first use. */
  flagsSet: string[];
  /** Non-fatal findings to log once logging is set up, e.g. ignored upstream fields. */
  warnings: string[];
}

const SUBCOMMANDS: readonly Command[] = [
  "plan",
  "demo",
  "explain",
  "diff",
  "hand-back",
  "version",
  "help",
];
/**
 * Parses kproxy's command line and its `--config` file into a validated Config.
 *
 * @param argv The arguments after the program name.
 * @param env Reads the config file and tells the host name.
 * @returns The subcommand, the configuration and the remaining arguments.
 * @throws {ConfigError} On any bad flag, file field or combination; `field` names it.
 * @example Usage
 * ```ts
 * import { parseCommandLine } from "./command_line.ts";
 * const env = { readTextFile: () => "", hostname: () => "node-a" };
 * parseCommandLine(["plan", "--proxy-mode=iptables"], env).config.proxyMode; // "iptables"
 * ```
 */
export function parseCommandLine(argv: string[], env: ConfigEnvironment): CommandLine {
  const tokens = tokenize(argv);
  const options = tokens.filter((t) => t.kind === "option");
  const positionals = tokens.filter((t) => t.kind === "positional").map((t) => t.value);
  const flagsSet = [...new Set(options.map((t) => t.name))];

  const first = positionals[0];
  const subcommand = SUBCOMMANDS.find((name) => name === first);
  const args = subcommand ? positionals.slice(1) : positionals;
  let command: Command = subcommand ?? "run";
  if (flagsSet.includes("version")) command = "version";
  if (flagsSet.includes("help")) command = "help";

  const config = defaultConfig(env.hostname());
  const origins: Origins = new Map();
  const warnings: string[] = [];
  if (command === "help" || command === "version") {
    return { command, config, args, flagsSet, warnings };
  }

  // Requests only while parsing; resolveGates turns them into every gate's value.
  config.featureGates = {};
  const configPath = options.findLast((t) => t.name === "config")?.value ?? "";
  if (configPath !== "") {
    let text: string;
    try {
      text = env.readTextFile(configPath);
    } catch (error) {
      const detail = error instanceof Error ? error.message.split("\n")[0] : String(error);
      throw new ConfigError("--config", `Cannot read --config ${quote(configPath)}: ${detail}`);
    }
    applyConfigFile(text, { config, origins, warnings, path: configPath });
  }

  for (const option of options) {
    const spec = FLAGS_BY_NAME.get(option.name);
    if (configPath !== "" && spec !== undefined && ignoredByUpstreamWithConfig(spec)) {
      warnings.push(
        `Applying ${flagLabel(option.name)} although --config is given: kube-proxy ignores it ` +
          "then, kproxy lets the command line override the file",
      );
    }
    if (!spec?.apply) {
      if (spec?.group === "Accepted for compatibility, ignored") {
        warnings.push(`Ignoring ${flagLabel(option.name)}: kproxy does not support it`);
      }
      continue;
    }
    const field = flagLabel(option.name);
    spec.apply(config, option.value, field);
    if (spec.key !== undefined) origins.set(spec.key, field);
  }
  resolveGates(config, origins, warnings);
  if (configPath === "") applyDeprecatedPorts(config, options, origins);
  applyModeDefaults(config, origins, flagsSet);
  validate(config, origins);

  if (options.findLast((t) => t.name === "init-only")?.value === "true") command = "init-only";
  const line: CommandLine = { command, config, args, flagsSet, warnings };
  const from = options.findLast((t) => t.name === "from")?.value;
  const node = options.findLast((t) => t.name === "node")?.value;
  if (command === "explain") {
    if (args.length !== 1) {
      throw new ConfigError(
        "DEST",
        "Cannot parse explain: want one DEST (IP:port), e.g. explain 10.96.0.10:53",
      );
    }
    if (from !== undefined && from !== "") toIP(from, "--from");
    line.explain = {
      from: from ?? "",
      node: node?.trim().toLowerCase() || config.hostnameOverride,
    };
  } else {
    const stray = from !== undefined ? "--from" : node !== undefined ? "--node" : undefined;
    if (stray) {
      throw new ConfigError(stray, `Cannot parse ${stray}: only valid with the explain subcommand`);
    }
    if (command === "run" && args.length > 0) {
      throw new ConfigError(
        "command",
        `Cannot parse command: unknown subcommand ${
          quote(args[0])
        } (want plan, demo, explain, diff or hand-back)`,
      );
    }
  }
  return line;
}

/** Replaces the requested gates with every gate's value, as kube-proxy's SetFromMap does. */
function resolveGates(config: Config, origins: Origins, warnings: string[]): void {
  const resolved = resolveFeatureGates(config.featureGates);
  const field = origins.get("featureGates") ?? "--feature-gates";
  if (resolved.errors.length > 0) {
    throw new ConfigError(field, `Invalid ${field}: ${resolved.errors.join("; ")}`);
  }
  for (const warning of resolved.warnings) warnings.push(`${field}: ${warning}`);
  config.featureGates = resolved.gates;
}

/**
 * What depends on the final mode, as kube-proxy 1.36 decides it: the
 * nftables mode alone defaults nodePortAddresses to primary
 * (platformApplyDefaults), and --iptables-sync-period and
 * --iptables-min-sync-period set the periods of every mode but ipvs
 * (processV1Alpha1Flags); kproxy's --nftables-* flags win over them.
 */
function applyModeDefaults(config: Config, origins: Origins, flagsSet: string[]): void {
  if (config.proxyMode === "nftables" && config.nodePortAddresses.length === 0) {
    config.nodePortAddresses = ["primary"];
  }
  if (config.proxyMode !== "nftables") return;
  for (
    const [period, key] of [["sync-period", "syncPeriodMs"], [
      "min-sync-period",
      "minSyncPeriodMs",
    ]] as const
  ) {
    if (flagsSet.includes(`iptables-${period}`) && !flagsSet.includes(`nftables-${period}`)) {
      config.nftables[key] = config.iptables[key];
      origins.set(`nftables.${key}`, `--iptables-${period}`);
    }
  }
}

/** Flags kube-proxy still reads beside --config: everything else it takes from the file only. */
const KEPT_WITH_CONFIG = new Set([
  "config",
  "hostname-override",
  "master",
  "cleanup",
  "init-only",
  "v",
  "version",
  "help",
]);

/** Whether kube-proxy 1.36 would drop this flag because --config is given (options.go Complete). */
function ignoredByUpstreamWithConfig(spec: FlagSpec): boolean {
  return !KEPT_WITH_CONFIG.has(spec.name) && !spec.help.startsWith("kproxy:") &&
    spec.group !== "explain" && spec.group !== "Accepted for compatibility, ignored";
}

/**
 * --healthz-port and --metrics-port without --config, as kube-proxy's
 * addressFromDeprecatedFlags: 0 disables the server; any other port leaves the
 * address as it is, since it always has a port (AppendPortIfNeeded).
 */
function applyDeprecatedPorts(
  config: Config,
  options: { name: string; value: string }[],
  origins: Origins,
): void {
  const flags = [["healthz-port", "healthzBindAddress"], ["metrics-port", "metricsBindAddress"]];
  for (const [flag, key] of flags as [string, "healthzBindAddress" | "metricsBindAddress"][]) {
    const raw = options.findLast((t) => t.name === flag)?.value;
    if (raw === undefined) continue;
    const field = flagLabel(flag);
    const port = toInt(raw, field);
    if (port < 0 || port > 65535) {
      throw new ConfigError(field, `Cannot parse ${field}: ${port} is not a port`);
    }
    if (port === 0) {
      config[key] = "";
      origins.set(key, field);
    }
  }
}
