/**
 * What each program kproxy runs may be asked to do: the argument shapes kproxy
 * uses, and statements its stdin scripts may not hold. `--allow-run` names
 * the programs; this names their uses, so that neither an argv nor a script
 * can make a program read or write a file (`nft -f /etc/shadow` echoes the
 * file's lines in its errors, `include "…"` does the same from a script,
 * `iptables-save -f` writes one), load a module with a program of its choice
 * (`--modprobe`), or run another program (`ip netns exec NS sh`, where only
 * programs of this policy may follow). Pure: the Executor applies it.
 *
 * @module
 */

import { isInterfaceName } from "../core/interface_name.ts";
import type { Command } from "../core/executor.ts";

/** Why a stdin script line (or chunk) is refused, or undefined when it is fine. */
type ScriptCheck = (text: string) => string | undefined;

/** The verdict on a program's arguments: refused, or allowed with a check for its stdin. */
type ArgsVerdict = { refused: string } | { script?: ScriptCheck; lines?: boolean };

/** How one program may be called. */
export interface ProgramRule {
  (args: readonly string[], policy: CommandPolicy): ArgsVerdict;
}

/** The rule of every program that may run; a program without one is refused. */
export type CommandPolicy = Readonly<Record<string, ProgramRule>>;

const OK: ArgsVerdict = {};
const refuse = (refused: string): ArgsVerdict => ({ refused });

/** A rule that allows any arguments and any stdin: for test programs (`sleep`, `sh`). */
export const ANY_ARGUMENTS: ProgramRule = () => OK;

const NAME = /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$/;
const NUMBER = /^\d{1,6}$/;
const TABLES = new Set(["filter", "nat", "mangle", "raw", "security"]);

/** An argument that names a path (kproxy's arguments never do). */
const PATH_LIKE = /^\.{0,2}\//;

/** Refuses text where `pattern` matches, saying it holds `what`. */
function forbid(pattern: RegExp, what: string): ScriptCheck {
  return (text) => pattern.test(text) ? `its script holds ${what}` : undefined;
}

// nft -----------------------------------------------------------------------

/** Options that change how nft reports, never what it reads. */
const NFT_FLAGS = new Set([
  "-c",
  "--check",
  "-j",
  "--json",
  "-n",
  "--numeric",
  "-s",
  "--stateless",
  "-t",
  "--terse",
  "-a",
  "--handle",
  "-e",
  "--echo",
]);

/** An `include` statement: at a line start or after `;`, `{` or `}`. */
const NFT_INCLUDE = /(?:^|[;{}])[ \t]*include\b/m;

const nftRule: ProgramRule = (args) => {
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!;
    if (NFT_FLAGS.has(arg)) continue;
    if (arg === "-f" || arg === "--file") {
      if (args[i + 1] !== "-" || i + 2 !== args.length) {
        return refuse(`nft reads scripts from stdin only ("-f -"), not "${args[i + 1] ?? ""}"`);
      }
      return { script: forbid(NFT_INCLUDE, "an include statement") };
    }
    if (arg === "list") {
      const names = args.slice(i + 1);
      const bad = names.find((name) => !NAME.test(name));
      if (names.length === 0 || names.length > 4 || bad !== undefined) {
        return refuse(`nft may list named objects only, not "${bad ?? names.join(" ")}"`);
      }
      return OK;
    }
    return refuse(`nft may only read a script from stdin ("-f -") or list, not "${arg}"`);
  }
  return refuse("nft without a command");
};

// iptables ------------------------------------------------------------------

/** Options of iptables that name a program or a file. */
const IPTABLES_FORBIDDEN = /^(?:-M|--modprobe(?:=.*)?|--object-pinned(?:=.*)?)$/;

/** A `-M`/`--modprobe` option in a restore script: the program run to load a module. */
const RESTORE_MODPROBE = /(?:^|\s)(?:-M|--modprobe)(?:[\s=]|$)/m;

const iptablesRule: ProgramRule = (args) => {
  const bad = args.find((arg) => IPTABLES_FORBIDDEN.test(arg) || PATH_LIKE.test(arg));
  return bad === undefined ? OK : refuse(`iptables may not be given "${bad}"`);
};

const iptablesSaveRule: ProgramRule = (args) => {
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!;
    if (arg === "-c" || arg === "--counters") continue;
    if ((arg === "-t" || arg === "--table") && TABLES.has(args[i + 1] ?? "")) {
      i++;
      continue;
    }
    return refuse(`iptables-save may only be given -t TABLE and -c, not "${arg}"`);
  }
  return OK;
};

const RESTORE_FLAGS = new Set([
  "-n",
  "--noflush",
  "-c",
  "--counters",
  "-t",
  "--test",
  "-v",
  "--verbose",
  "-w",
  "--wait",
]);

const iptablesRestoreRule: ProgramRule = (args) => {
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!;
    if ((arg === "-w" || arg === "--wait" || arg === "-W") && NUMBER.test(args[i + 1] ?? "")) {
      i++;
      continue;
    }
    if ((arg === "-T" || arg === "--table") && TABLES.has(args[i + 1] ?? "")) {
      i++;
      continue;
    }
    if (RESTORE_FLAGS.has(arg)) continue;
    return refuse(`iptables-restore reads its input from stdin only, not "${arg}"`);
  }
  return { script: forbid(RESTORE_MODPROBE, "a --modprobe option") };
};

/** The rules of every iptables program name of both families and variants. */
function iptablesRules(): Record<string, ProgramRule> {
  const rules: Record<string, ProgramRule> = {};
  for (const family of ["iptables", "ip6tables"]) {
    for (const variant of ["", "-nft", "-legacy"]) {
      rules[`${family}${variant}`] = iptablesRule;
      rules[`${family}${variant}-save`] = iptablesSaveRule;
      rules[`${family}${variant}-restore`] = iptablesRestoreRule;
    }
  }
  return rules;
}

// ip ------------------------------------------------------------------------

/** The only lines of an `ip -batch -` script: addresses of a dummy interface. */
const IP_BATCH_LINE =
  /^(?:address|addr) (?:add|del|delete|replace) [0-9A-Fa-f.:]+\/\d{1,3} dev [A-Za-z0-9_][A-Za-z0-9_.-]{0,14}$/;

const ipBatchLine: ScriptCheck = (line) =>
  line === "" || IP_BATCH_LINE.test(line)
    ? undefined
    : `its batch line "${line.slice(0, 80)}" is not an address change of a dummy interface`;

const ipRule: ProgramRule = (args, policy) => {
  const [first, second, third, ...rest] = args;
  const text = args.join(" ");
  if (first === "-batch" && second === "-" && args.length === 2) {
    return { script: ipBatchLine, lines: true };
  }
  if (first === "link") {
    if ((second === "del" || second === "delete") && isInterfaceName(third ?? "") && !rest.length) {
      return OK;
    }
    if (second === "add" && isInterfaceName(third ?? "") && rest.join(" ") === "type dummy") {
      return OK;
    }
  }
  if (first === "-o" && (second === "address" || second === "addr") && third === "show") {
    if (rest.length === 2 && rest[0] === "dev" && isInterfaceName(rest[1]!)) return OK;
  }
  if (first === "netns" && NAME.test(third ?? "")) {
    if (["add", "del", "delete"].includes(second ?? "") && !rest.length) return OK;
    if (second === "exec") {
      const [program = "", ...programArgs] = rest;
      return Object.hasOwn(policy, program) && program !== "ip"
        ? policy[program]!(programArgs, policy)
        : refuse(`ip netns exec may run kproxy's programs only, not "${program}"`);
    }
  }
  return refuse(
    `ip may only change a dummy interface and its addresses or a namespace, not "${text}"`,
  );
};

// the others ----------------------------------------------------------------

/** An `ipset` option naming a file. */
const IPSET_FILE = /^-{1,2}f(?:ile)?$/;
const IPSET_FILE_IN_SCRIPT = /(?:^|\s)-{1,2}f(?:ile)?(?:\s|$)/m;

const ipsetRule: ProgramRule = (args) => {
  const [command = "", ...rest] = args;
  const bad = args.find((arg) => IPSET_FILE.test(arg) || PATH_LIKE.test(arg));
  if (bad !== undefined) return refuse(`ipset may not be given "${bad}"`);
  if (command === "restore" && rest.every((arg) => arg === "-exist" || arg === "-!")) {
    return { script: forbid(IPSET_FILE_IN_SCRIPT, "a -file option") };
  }
  if (["destroy", "flush", "list"].includes(command) && rest.every((arg) => NAME.test(arg))) {
    return OK;
  }
  if (command === "list" && rest.length === 1 && rest[0] === "-n") return OK;
  if (command === "version" && rest.length === 0) return OK;
  return refuse(
    `ipset may only restore from stdin, list, flush, destroy or print its version, not "${command}"`,
  );
};

const ipvsadmRule: ProgramRule = (args) => {
  const text = args.join(" ");
  if (["-Ln", "-Sn", "--restore", "-R", "-Ln --stats --exact"].includes(text)) return OK;
  if (args[0] === "--set" && args.length === 4 && args.slice(1).every((n) => NUMBER.test(n))) {
    return OK;
  }
  return refuse(`ipvsadm may only list, restore from stdin or set timeouts, not "${text}"`);
};

// nfacct ---------------------------------------------------------------------

/** An nfacct object name (the kernel allows 31 characters). */
const NFACCT_OBJECT = "[A-Za-z0-9_][A-Za-z0-9_.-]{0,30}";
const NFACCT_NAME = new RegExp(`^${NFACCT_OBJECT}$`);
/** One line of `nfacct restore` input (`nfacct list` output), or the empty last one. */
const NFACCT_RESTORE_LINE = new RegExp(
  `^(?:\\{ pkts = \\d{1,20}, bytes = \\d{1,20} \\} = ${NFACCT_OBJECT};)?$`,
);

/** nfacct lists its objects, adds or deletes one, or restores objects read from stdin. */
const nfacctRule: ProgramRule = (args) => {
  const [command = "", ...rest] = args;
  if (command === "list" && rest.length === 0) return OK;
  if ((command === "add" || command === "del") && rest.length === 1 && NFACCT_NAME.test(rest[0]!)) {
    return OK;
  }
  if (command === "restore" && rest.length === 0) {
    return {
      lines: true,
      script: (line) =>
        NFACCT_RESTORE_LINE.test(line)
          ? undefined
          : `its line "${line.slice(0, 80)}" is not an nfacct object at a count`,
    };
  }
  return refuse(
    `nfacct may only list, add or delete one object, or restore from stdin, not "${
      args.join(" ")
    }"`,
  );
};

// conntrack ------------------------------------------------------------------

/** A listing of one family and protocol (lib/core/conntrack.ts `listArgs`). */
const CONNTRACK_LIST = /^-L -f ipv[46] -p (?:udp|sctp)$/;

/** An address or port in a conntrack delete line: characters of an IP, digits of a port. */
const CT_IP = "[0-9A-Fa-f.:]{2,45}";
const CT_PORT = "\\d{1,5}";

/** One stdin line of `conntrack -R -` (lib/core/conntrack.ts `deleteLine`), or the empty last one. */
const CONNTRACK_DELETE = new RegExp(
  `^(?:-D -f ipv[46] -p (?:udp|sctp) --orig-dst ${CT_IP} --orig-port-dst ${CT_PORT} ` +
    `--reply-src ${CT_IP} --reply-port-src ${CT_PORT})?$`,
);

/** conntrack lists one family's UDP or SCTP entries, or deletes exact pairs read from stdin. */
const conntrackRule: ProgramRule = (args) => {
  const text = args.join(" ");
  if (CONNTRACK_LIST.test(text)) return OK;
  if (text === "-R -") {
    return {
      lines: true,
      script: (line) =>
        CONNTRACK_DELETE.test(line)
          ? undefined
          : `its script holds "${line.slice(0, 80)}", not a delete of one UDP or SCTP pair`,
    };
  }
  return refuse(`conntrack may only list or delete UDP and SCTP entries, not "${text}"`);
};

/** A network sysctl: kproxy sets and reads nothing else. */
const NET_SYSCTL = /^net\.[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*$/;

const sysctlRule: ProgramRule = (args) => {
  if (args.length === 2 && args[0] === "-w") {
    const [key = "", value] = args[1]!.split(/=(.*)/s);
    if (NET_SYSCTL.test(key) && value !== undefined && /^[A-Za-z0-9_.:-]{1,64}$/.test(value)) {
      return OK;
    }
  }
  if (args.length === 2 && args[0] === "-n" && NET_SYSCTL.test(args[1]!)) return OK;
  return refuse(`sysctl may only read or set one net.* key, not "${args.join(" ")}"`);
};

/** choom sets kproxy's own OOM score, nothing else: `choom -n N -p <kproxy's pid>`. */
const choomRule: ProgramRule = (args) => {
  const [adjust, value = "", pid, target] = args;
  const score = /^-?\d{1,4}$/.test(value) ? Number(value) : NaN;
  if (
    args.length === 4 && adjust === "-n" && score >= -1000 && score <= 1000 && pid === "-p" &&
    target === String(Deno.pid)
  ) {
    return OK;
  }
  return refuse(`choom may only set kproxy's own OOM score, not "${args.join(" ")}"`);
};

/** PowerShell runs the script on stdin; no script file, no encoded command. */
const powershellRule: ProgramRule = (args) => {
  const bad = args.find((arg) => /^-(?:f|file|e|ec|encodedcommand)$/i.test(arg));
  if (bad !== undefined) return refuse(`PowerShell may not be given "${bad}"`);
  if (!args.includes("-NoProfile") || !args.includes("-NonInteractive")) {
    return refuse("PowerShell must run with -NoProfile -NonInteractive");
  }
  return OK;
};

/** How kproxy may run each of its programs (backends/registry.ts lists them per mode). */
export const KPROXY_COMMAND_POLICY: CommandPolicy = Object.freeze({
  nft: nftRule,
  ...iptablesRules(),
  ip: ipRule,
  ipset: ipsetRule,
  ipvsadm: ipvsadmRule,
  conntrack: conntrackRule,
  nfacct: nfacctRule,
  sysctl: sysctlRule,
  choom: choomRule,
  "powershell.exe": powershellRule,
  pwsh: powershellRule,
});

/** Text carried from one stdin chunk into the check of the next, so no statement is split. */
const CARRY = 256;

/** The pieces of a command's stdin. */
function stdinPieces(stdin: string | Iterable<string>): Iterable<string> {
  return typeof stdin === "string" ? [stdin] : stdin;
}

/** Checks every complete line of `pieces`. */
function checkLines(pieces: Iterable<string>, check: ScriptCheck): string | undefined {
  let rest = "";
  for (const piece of pieces) {
    const lines = (rest + piece).split("\n");
    rest = lines.pop() ?? "";
    for (const line of lines) {
      const problem = check(line);
      if (problem !== undefined) return problem;
    }
  }
  return check(rest);
}

/** Checks each piece with the end of the previous one in front of it. */
function checkChunks(pieces: Iterable<string>, check: ScriptCheck): string | undefined {
  let carry = "";
  for (const piece of pieces) {
    // The "x" keeps a truncated carry from starting a line of its own.
    const problem = check(carry + piece);
    if (problem !== undefined) return problem;
    carry = `x${(carry + piece).slice(-CARRY)}`;
  }
  return undefined;
}

/**
 * Why `policy` refuses `command`, or undefined when it may run. Reads the
 * whole stdin when the program's script is checked, so a stdin iterable must
 * be iterable again to be written (DenoExecutor collects a one-shot iterator
 * first).
 *
 * @example Usage
 * ```ts
 * import { commandRefusal, KPROXY_COMMAND_POLICY } from "./command_policy.ts";
 * commandRefusal({ program: "nft", args: ["-f", "/etc/shadow"] }, KPROXY_COMMAND_POLICY);
 * // 'nft reads scripts from stdin only ("-f -"), not "/etc/shadow"'
 * ```
 */
export function commandRefusal(command: Command, policy: CommandPolicy): string | undefined {
  if (!Object.hasOwn(policy, command.program)) return "no argument policy names it";
  const verdict = policy[command.program]!(command.args, policy);
  if ("refused" in verdict) return verdict.refused;
  if (verdict.script === undefined || command.stdin === undefined) return undefined;
  const pieces = stdinPieces(command.stdin);
  return verdict.lines ? checkLines(pieces, verdict.script) : checkChunks(pieces, verdict.script);
}
