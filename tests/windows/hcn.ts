/**
 * What the Windows tests need to run PowerShell for real on Linux: PowerShell 7
 * (`pwsh`, a .NET tool), the HCN stand-in (`hcn/computenetwork.c`, built here
 * with the machine's `cc` into a temporary directory, never committed as a
 * binary) and its state file, and Pester for the service scripts.
 *
 * Each helper reports why it cannot run (printed once, so a skipped test is
 * never silent) instead of failing.
 *
 * @module
 */

import { deepStrictEqual as assertEquals, ok } from "node:assert/strict";
import { POWERSHELL_ARGS } from "../../backends/windows/applier.ts";
import { DenoExecutor, spawnCommand } from "../../lib/shell/exec.ts";
import type { Command, CommandResult, Executor } from "../../lib/core/executor.ts";
import {
  ANY_ARGUMENTS,
  commandRefusal,
  KPROXY_COMMAND_POLICY,
} from "../../lib/shell/command_policy.ts";

const HERE = new URL(".", import.meta.url).pathname;
const REPO = new URL("../../", import.meta.url).pathname;

/** Where `.ci/run` installs Pester as a PowerShell module. */
export const PESTER_MODULES = `${REPO}.tools/pwsh-modules`;

/** The Pester version the service-script tests need. */
export const PESTER_VERSION = "6.2.0";

/**
 * The absolute path of `program` as a shell of this machine finds it (PATH,
 * then `fallback`), or undefined. Tests run with `--ignore-env`, so the
 * environment is read by a child, not by Deno.env.
 */
async function findProgram(program: string, fallback = ""): Promise<string | undefined> {
  const { code, stdout } = await spawnCommand({
    program: "sh",
    args: [
      "-c",
      'command -v "$1" || { [ -n "$2" ] && [ -x "$2" ] && printf "%s\\n" "$2"; }',
      "sh",
      program,
      fallback,
    ],
  });
  const path = stdout.trim();
  return code === 0 && path.startsWith("/") ? path : undefined;
}

/** PowerShell and the built HCN stand-in. */
export interface PwshTools {
  /** Absolute path of `pwsh`. */
  pwsh: string;
  /** The directory holding `computenetwork.dll` (the stand-in). */
  libraryDir: string;
}

async function homeDir(): Promise<string> {
  const { stdout } = await spawnCommand({ program: "sh", args: ["-c", 'printf "%s" "$HOME"'] });
  return stdout || "/root";
}

let tools: Promise<PwshTools | string> | undefined;

let pwsh: Promise<string | undefined> | undefined;

/**
 * The absolute path of PowerShell 7 (`pwsh`, on PATH or as a .NET global tool),
 * or undefined (and the reason printed once).
 */
export function pwshPath(): Promise<string | undefined> {
  pwsh ??= (async () => {
    const found = Deno.build.os === "linux"
      ? await findProgram("pwsh", `${await homeDir()}/.dotnet/tools/pwsh`)
      : undefined;
    if (!found) {
      console.warn(
        "PowerShell tests skipped: pwsh is not installed " +
          "(dotnet tool install --global PowerShell --version 7.6.9)",
      );
    }
    return found;
  })();
  return pwsh;
}

async function buildTools(): Promise<PwshTools | string> {
  const pwsh = await pwshPath();
  if (!pwsh) return "pwsh is not installed";
  const cc = await findProgram("cc");
  if (!cc) return "no C compiler (cc) to build the HCN stand-in";
  const libraryDir = await Deno.makeTempDir({ prefix: "kp-hcn-lib-" });
  const sources = ["computenetwork.c", "schema.c", "json.c"].map((file) => `${HERE}hcn/${file}`);
  const built = await spawnCommand({
    program: cc,
    args: [
      "-shared",
      "-fPIC",
      "-fvisibility=hidden",
      "-O1",
      "-Wall",
      "-Wextra",
      "-Werror",
      "-o",
      `${libraryDir}/computenetwork.dll`,
      ...sources,
    ],
  });
  if (built.code !== 0) throw new Error(`Cannot build the HCN stand-in:\n${built.stderr}`);
  return { pwsh, libraryDir };
}

/**
 * PowerShell and the HCN stand-in, built once per test module; a string says
 * why they cannot be had here (and is printed).
 */
export async function pwshTools(): Promise<PwshTools | string> {
  if (!tools) {
    tools = buildTools().then((result) => {
      if (typeof result === "string" && result !== "pwsh is not installed") {
        console.warn(`PowerShell tests skipped: ${result}`);
      }
      return result;
    });
  }
  return await tools;
}

/** An HNS network as the state file holds it (HostComputeNetwork properties). */
export interface HcnNetwork {
  ID: string;
  Name: string;
  Type: "L2Bridge" | "Overlay" | "NAT" | "Transparent" | "L2Tunnel" | "ICS" | "Private";
  Policies?: { Type: string; Settings: Record<string, unknown> }[];
  SchemaVersion?: { Major: number; Minor: number };
}

/** An endpoint as the state file holds it (HostComputeEndpoint properties). */
export interface HcnEndpoint {
  ID: string;
  Name?: string;
  HostComputeNetwork: string;
  IpConfigurations?: { IpAddress: string; PrefixLength?: number }[];
  MacAddress?: string;
  Flags?: number;
  Policies?: { Type: string; Settings?: Record<string, unknown> }[];
  SchemaVersion?: { Major: number; Minor: number };
}

/** A load balancer as the state file holds it (HostComputeLoadBalancer properties). */
export interface HcnLoadBalancer {
  ID: string;
  HostComputeEndpoints?: string[];
  SourceVIP?: string;
  FrontendVIPs?: string[];
  PortMappings?: {
    Protocol?: number;
    InternalPort?: number;
    ExternalPort?: number;
    DistributionType?: number;
    Flags?: number;
  }[];
  Flags?: number;
  SchemaVersion?: { Major: number; Minor: number };
}

/** A failure the stand-in injects into matching calls. */
export interface HcnFault {
  /** The exported function, e.g. "HcnCreateLoadBalancer". */
  function: string;
  /** Only calls naming this object (any case). */
  id?: string;
  /** @default {0x80004005} */
  hresult?: number;
  /**
   * "kill" kills the calling process (a script killed half-way); "ignoreId" lets a creation
   * succeed under an id of the stand-in's instead of the caller's. @default {"fail"}
   */
  action?: "fail" | "kill" | "ignoreId";
  /** Matching calls to let through first. @default {0} */
  after?: number;
  /** Calls to fail; -1 for all. @default {1} */
  count?: number;
}

/** The stand-in's whole state. */
export interface HcnStateDocument {
  networks: HcnNetwork[];
  endpoints: HcnEndpoint[];
  loadBalancers: HcnLoadBalancer[];
  faults?: HcnFault[];
  /** Handles opened and not closed, kept by the stand-in. */
  openHandles?: number;
}

/** The stand-in's state file and call log. */
export class HcnState {
  readonly path: string;

  constructor(path: string) {
    this.path = path;
  }

  /** A state file in a new temporary directory. */
  static async create(initial: HcnStateDocument): Promise<HcnState> {
    const dir = await Deno.makeTempDir({ prefix: "kp-hcn-state-" });
    const state = new HcnState(`${dir}/state.json`);
    await state.write(initial);
    return state;
  }

  /** Replaces the state and clears the call log. */
  async write(document: HcnStateDocument): Promise<void> {
    await Deno.writeTextFile(this.path, JSON.stringify(document));
    await Deno.writeTextFile(`${this.path}.calls`, "");
  }

  async read(): Promise<HcnStateDocument> {
    return JSON.parse(await Deno.readTextFile(this.path));
  }

  /**
   * Changes the state in place (the call log is kept), holding the lock every
   * stand-in call holds, as HNS changes under a running kproxy.
   */
  async update(change: (document: HcnStateDocument) => void): Promise<void> {
    using lock = await Deno.open(`${this.path}.lock`, { create: true, write: true });
    await lock.lock(true);
    const document = await this.read();
    change(document);
    await Deno.writeTextFile(this.path, JSON.stringify(document));
  }

  /** Every call since the last {@linkcode write}, as "Function ID" lines. */
  async calls(): Promise<string[]> {
    const text = await Deno.readTextFile(`${this.path}.calls`);
    return text.split("\n").filter((line) => line !== "");
  }

  /** The calls that change HNS: creations and deletions. */
  async changingCalls(): Promise<string[]> {
    return (await this.calls()).filter((line) => /^Hcn(Create|Delete)/.test(line));
  }

  async remove(): Promise<void> {
    await Deno.remove(this.path.slice(0, this.path.lastIndexOf("/")), { recursive: true });
  }

  /**
   * An Executor for the backend: it runs the backend's PowerShell commands
   * (`pwsh` or `powershell.exe`, both as `pwsh`, and nothing else) through a real {@linkcode DenoExecutor}, with the library
   * directory on LD_LIBRARY_PATH and this state file in KPROXY_HCN_STATE, so
   * the C# shim's `DllImport("computenetwork.dll")` loads the stand-in.
   */
  executor(tools: PwshTools, options: { timeoutMs?: number } = {}): StandInExecutor {
    return new StandInExecutor(tools, this, options.timeoutMs);
  }
}

/** See {@linkcode HcnState.executor}. */
export class StandInExecutor implements Executor {
  readonly #tools: PwshTools;
  readonly #state: HcnState;
  readonly #timeoutMs?: number;
  readonly #real = new DenoExecutor({
    allowedPrograms: ["env"],
    policy: { env: ANY_ARGUMENTS },
  });
  /** PowerShell scripts run, in order. */
  readonly scripts: string[] = [];

  constructor(tools: PwshTools, state: HcnState, timeoutMs?: number) {
    this.#tools = tools;
    this.#state = state;
    this.#timeoutMs = timeoutMs;
  }

  run(command: Command): Promise<CommandResult> {
    // powershell.exe is what the mode registry's backend runs on a Windows node; pwsh stands in.
    if (command.program !== "pwsh" && command.program !== "powershell.exe") {
      return Promise.reject(
        new Error(`Cannot run "${command.program}": the HCN stand-in runs only PowerShell`),
      );
    }
    const refused = commandRefusal(command, KPROXY_COMMAND_POLICY);
    if (refused !== undefined) {
      return Promise.reject(new Error(`Cannot run "${command.program}": ${refused}`));
    }
    this.scripts.push(typeof command.stdin === "string" ? command.stdin : "");
    return this.#real.run({
      ...command,
      program: "env",
      args: [
        `LD_LIBRARY_PATH=${this.#tools.libraryDir}`,
        `KPROXY_HCN_STATE=${this.#state.path}`,
        this.#tools.pwsh,
        ...command.args,
      ],
      timeoutMs: Math.min(command.timeoutMs ?? 120_000, this.#timeoutMs ?? 120_000),
    });
  }
}

/**
 * Runs a PowerShell script the way the backend does (on stdin, parsed whole),
 * against `state` when given, and returns its exit code and output.
 */
export async function runPwsh(
  tools: PwshTools,
  script: string,
  options: { state?: HcnState; args?: string[] } = {},
): Promise<CommandResult> {
  const env = options.state
    ? [`LD_LIBRARY_PATH=${tools.libraryDir}`, `KPROXY_HCN_STATE=${options.state.path}`]
    : [];
  return await spawnCommand({
    program: "env",
    args: [...env, tools.pwsh, ...(options.args ?? POWERSHELL_ARGS)],
    stdin: script,
    timeoutMs: 120_000,
  });
}

/**
 * An IPv4 address of this machine on an adapter with a MAC (read, never sent to): a Windows
 * node's address, for the scripts that look up the host's MAC as upstream's `GetHostMac` does.
 * Undefined (and the reason printed) when there is none.
 */
export function hostAddress(): { ip: string; mac: string } | undefined {
  const found = Deno.networkInterfaces().find((nic) =>
    nic.family === "IPv4" && !nic.address.startsWith("127.") && nic.mac !== "00:00:00:00:00:00"
  );
  if (found === undefined) {
    console.warn("Overlay tests skipped: no IPv4 address on an adapter with a MAC");
    return undefined;
  }
  return { ip: found.address, mac: found.mac.replaceAll(":", "-").toLowerCase() };
}

/** The path of a file beside this module. */
export function testFile(name: string): string {
  return `${HERE}${name}`;
}

/** The HCN state, read back, with lookups by frontend. */
export class HcnView {
  constructor(readonly document: HcnStateDocument) {}

  /** The one load balancer serving `vip` (or "" for node ports) on `port`/`protocol`. */
  lb(vip: string, port: number, options: { protocol?: number; ipv6?: boolean } = {}) {
    const found = this.document.loadBalancers.filter((lb) =>
      (lb.FrontendVIPs ?? []).join() === vip &&
      lb.PortMappings?.[0]?.ExternalPort === port &&
      lb.PortMappings?.[0]?.Protocol === (options.protocol ?? 6) &&
      ((lb.Flags ?? 0) & 2) === (options.ipv6 ? 2 : 0)
    );
    assertEquals(found.length, 1, `one load balancer for ${vip || "node port"}:${port}`);
    return found[0]!;
  }

  /** "IP local" / "IP remote" for each endpoint of `lb`, sorted. */
  backends(lb: HcnLoadBalancer): string[] {
    return (lb.HostComputeEndpoints ?? []).map((id) => {
      const ep = this.document.endpoints.find((e) => e.ID.toUpperCase() === id.toUpperCase());
      ok(ep, `endpoint ${id} of load balancer ${lb.ID} exists`);
      return `${ep.IpConfigurations?.[0]?.IpAddress} ${(ep.Flags ?? 0) & 1 ? "remote" : "local"}`;
    }).sort();
  }

  /** The remote endpoint with `ip`. */
  remote(ip: string): HcnEndpoint {
    const found = this.document.endpoints.filter((e) =>
      (e.Flags ?? 0) & 1 && e.IpConfigurations?.[0]?.IpAddress === ip &&
      e.Name?.startsWith("kproxy-")
    );
    assertEquals(found.length, 1, `one remote endpoint for ${ip}`);
    return found[0]!;
  }

  /** Mapping flags, LB flags, distribution and internal port of `lb`. */
  shape(lb: HcnLoadBalancer) {
    const mapping = lb.PortMappings?.[0] ?? {};
    return {
      internalPort: mapping.InternalPort,
      portFlags: mapping.Flags,
      flags: lb.Flags,
      distribution: mapping.DistributionType,
      sourceVip: lb.SourceVIP,
    };
  }

  /** Asserts that objects with these ids (any case) still exist. */
  assertKept(ids: string[]): void {
    const all = [...this.document.loadBalancers, ...this.document.endpoints].map((o) =>
      o.ID.toUpperCase()
    );
    for (const id of ids) ok(all.includes(id.toUpperCase()), `${id} kept`);
  }
}
