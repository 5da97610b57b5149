/**
 * Runs a command under the restrictions of a systemd unit file without
 * systemd as PID 1, for tests: the settings are read from the unit itself,
 * so the test follows the unit.
 *
 * Reproduced: capabilities (bounding and ambient set, `setpriv`),
 * NoNewPrivileges, the system call filter (the unit's SystemCallFilter lines
 * expanded by `systemd-analyze syscall-filter`, applied with libseccomp
 * through Python's ctypes, SystemCallErrorNumber as the refusal),
 * RestrictAddressFamilies (socket() families), RestrictNamespaces (no
 * namespace flags to clone/unshare, no setns, clone3 answers ENOSYS as under
 * systemd), LockPersonality, SystemCallArchitectures=native (libseccomp
 * kills other ABIs), ProtectSystem=strict (every mount read-only but the
 * API file systems and the private /tmp), ReadWritePaths, ProtectHome,
 * PrivateTmp, PrivateDevices (a /dev with null, zero, full, random, urandom
 * and tty), ProtectKernelTunables (/proc/sys and /sys read-only),
 * ProtectKernelLogs (/proc/kmsg hidden), ProtectProc=invisible (a proc
 * instance with hidepid=invisible), ProtectHostname (a UTS namespace),
 * PrivateMounts (a mount namespace), UMask, LimitNOFILE and OOMScoreAdjust.
 *
 * Not reproduced: cgroup-based settings (DeviceAllow, IPAddressDeny), and the
 * mounts under /mnt, which belong to the machine's own tooling and are left
 * as they are.
 *
 * @module
 */

/** The [Service] settings of a unit file, by name; repeated settings keep every value. */
export function unitSettings(unit: string): Map<string, string[]> {
  const settings = new Map<string, string[]>();
  for (const line of unit.split("\n")) {
    const match = /^([A-Za-z]+)=(.*)$/.exec(line.trim());
    if (!match) continue;
    settings.set(match[1]!, [...settings.get(match[1]!) ?? [], match[2]!.trim()]);
  }
  return settings;
}

/**
 * The variables of a unit's `Environment=` lines: space-separated
 * `NAME=value` assignments, double-quoted when a value holds spaces.
 */
export function unitEnvironment(lines: readonly string[]): Record<string, string> {
  const env: Record<string, string> = {};
  for (const line of lines) {
    for (const [, quoted, bare] of line.matchAll(/"([^"]*)"|(\S+)/g)) {
      const assignment = quoted ?? bare!;
      const equals = assignment.indexOf("=");
      if (equals > 0) env[assignment.slice(0, equals)] = assignment.slice(equals + 1);
    }
  }
  return env;
}

/** Every system call of each `systemd-analyze syscall-filter` group, groups expanded. */
async function syscallGroups(): Promise<Map<string, Set<string>>> {
  const out = await new Deno.Command("systemd-analyze", {
    args: ["syscall-filter", "--no-pager"],
    stderr: "null",
  }).output();
  const members = new Map<string, string[]>();
  let group = "";
  for (const line of new TextDecoder().decode(out.stdout).split("\n")) {
    const word = line.trim();
    if (word === "" || word.startsWith("#")) continue;
    if (!line.startsWith(" ")) {
      group = word;
      members.set(group, []);
    } else if (group !== "") {
      members.get(group)!.push(word);
    }
  }
  const expand = (name: string, seen = new Set<string>()): string[] => {
    if (!name.startsWith("@")) return [name];
    if (seen.has(name)) return [];
    seen.add(name);
    return (members.get(name) ?? []).flatMap((member) => expand(member, seen));
  };
  return new Map([...members.keys()].map((name) => [name, new Set(expand(name))]));
}

/** The system calls a unit allows, computed as systemd does from its filter lines. */
export async function allowedSyscalls(settings: Map<string, string[]>): Promise<string[]> {
  const groups = await syscallGroups();
  const names = (item: string) => [...(groups.get(item) ?? new Set([item]))];
  let allowed: Set<string> | undefined;
  for (const line of settings.get("SystemCallFilter") ?? []) {
    const deny = line.startsWith("~");
    const items = line.replace(/^~/, "").split(/\s+/).filter((item) => item !== "");
    if (allowed === undefined) {
      if (deny) throw new TypeError("Cannot reproduce a deny-list SystemCallFilter");
      allowed = new Set();
    }
    for (const item of items) {
      for (const name of names(item)) deny ? allowed.delete(name) : allowed.add(name);
    }
  }
  if (allowed === undefined) throw new TypeError("The unit has no SystemCallFilter");
  // Settings that filter system calls of their own, as systemd applies them.
  const implied: [string, string[]][] = [
    ["PrivateDevices", ["@raw-io"]],
    ["ProtectClock", ["@clock"]],
    ["ProtectKernelModules", ["@module"]],
    ["ProtectKernelLogs", ["syslog"]],
    ["ProtectHostname", ["sethostname", "setdomainname"]],
  ];
  for (const [setting, denied] of implied) {
    if (settings.get(setting)?.at(-1) !== "yes") continue;
    for (const name of denied.flatMap(names)) allowed.delete(name);
  }
  return [...allowed].sort();
}

const ADDRESS_FAMILIES: Readonly<Record<string, number>> = {
  AF_UNIX: 1,
  AF_INET: 2,
  AF_INET6: 10,
  AF_NETLINK: 16,
  AF_PACKET: 17,
};

/** Applies a seccomp filter from a JSON spec (argv[1]), then runs argv[2:]. */
const SECCOMP_PY = `
import ctypes, errno, json, os, sys
spec = json.loads(sys.argv[1])
lib = ctypes.CDLL("libseccomp.so.2", use_errno=True)
lib.seccomp_init.restype = ctypes.c_void_p
lib.seccomp_init.argtypes = [ctypes.c_uint32]
lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint, ctypes.c_void_p]
lib.seccomp_load.argtypes = [ctypes.c_void_p]
class Cmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("a", ctypes.c_uint64), ("b", ctypes.c_uint64)]
ALLOW = 0x7fff0000
def refuse(code): return 0x00050000 | code
EQ, MASKED_EQ = 4, 7
ctx = lib.seccomp_init(refuse(getattr(errno, spec["errno"])))
def nr(name): return lib.seccomp_syscall_resolve_name(name.encode())
def add(action, name, *cmps):
    n = nr(name)
    if n < 0: return
    arr = (Cmp * max(1, len(cmps)))(*cmps)
    if lib.seccomp_rule_add_array(ctx, action, n, len(cmps), arr) != 0:
        sys.exit("seccomp: cannot add a rule for " + name)
special = {"socket", "clone", "clone3", "unshare", "setns", "personality"}
for name in spec["allow"]:
    if name not in special: add(ALLOW, name)
allowed = set(spec["allow"])
if "socket" in allowed:
    for family in spec["families"]: add(ALLOW, "socket", Cmp(0, EQ, family, 0))
ns = spec["namespaceFlags"]
for name in ("clone", "unshare"):
    if name in allowed and ns: add(ALLOW, name, Cmp(0, MASKED_EQ, ns, 0))
    elif name in allowed: add(ALLOW, name)
if "clone3" in allowed: add(refuse(errno.ENOSYS) if ns else ALLOW, "clone3")
if "setns" in allowed and not ns: add(ALLOW, "setns")
if "personality" in allowed:
    if spec["lockPersonality"]:
        for persona in (0, 0xffffffff): add(ALLOW, "personality", Cmp(0, EQ, persona, 0))
    else:
        add(ALLOW, "personality")
if lib.seccomp_load(ctx) != 0: sys.exit("seccomp: cannot load the filter")
os.execvp(sys.argv[2], sys.argv[2:])
`;

/** Mounts as the unit's file system settings say, then runs "$@" (the rest of argv). */
const MOUNTS_SH = `
set -eu
visible=$1; shift
mount --make-rprivate /
mount --bind "$visible" /srv
# PrivateTmp
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /tmp
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /var/tmp
# PrivateDevices
mkdir /tmp/.dev
mount -t tmpfs -o mode=755,nosuid,noexec tmpfs /tmp/.dev
for node in null zero full random urandom tty; do
  touch /tmp/.dev/$node
  mount --bind /dev/$node /tmp/.dev/$node
done
mount --move /tmp/.dev /dev
rmdir /tmp/.dev
# ProtectProc=invisible, ProtectKernelLogs
mount -t proc -o nosuid,nodev,noexec,hidepid=invisible proc /proc
mount --bind /dev/null /proc/kmsg
# ProtectKernelTunables, with /proc/sys/net writable (ReadWritePaths)
mount --bind /proc/sys /proc/sys
mount -o remount,bind,ro /proc/sys
mount --bind /proc/sys/net /proc/sys/net
mount -o remount,bind,rw /proc/sys/net
mount -o remount,bind,ro /sys
# ProtectHome
for home in /root /home /run/user; do
  [ -d $home ] && mount -t tmpfs -o ro,mode=755 tmpfs $home
done
# ProtectSystem=strict: every other mount read-only
awk '{print $5}' /proc/self/mountinfo | while read -r point; do
  case $point in
    /proc|/proc/*|/sys|/sys/*|/dev|/dev/*|/tmp|/tmp/*|/var/tmp|/var/tmp/*|/mnt/*|/root|/home|/run/user) ;;
    *) mount -o remount,bind,ro "$point" 2>/dev/null || true ;;
  esac
done
# ReadWritePaths (a "-" path may be missing)
for path in $RW_PATHS; do
  optional=false
  case $path in -*) optional=true; path=\${path#-} ;; esac
  case $path in /proc/sys/net) continue ;; esac
  if [ -e "$path" ]; then
    mount --bind "$path" "$path"
    mount -o remount,bind,rw "$path"
  elif [ $optional = false ]; then
    echo "sandbox: ReadWritePaths $path is missing" >&2; exit 1
  fi
done
umask "$UMASK"
# LimitNOFILE, or the hard limit when this machine's is lower
ulimit -n "$NOFILE" 2>/dev/null || ulimit -n "$(ulimit -Hn)"
# OOMScoreAdjust, set while the shell still has CAP_SYS_RESOURCE and inherited by "$@"
# (best effort: some kernels, as under gVisor, refuse the write with EIO)
if [ -n "$OOM_SCORE_ADJ" ]; then
  { echo "$OOM_SCORE_ADJ" > /proc/$$/oom_score_adj; } 2>/dev/null ||
    echo "sandbox: OOMScoreAdjust=$OOM_SCORE_ADJ refused by this kernel" >&2
fi
exec "$@"
`;

/** Namespace flags of clone/unshare (CLONE_NEW*): none may be set under RestrictNamespaces=yes. */
const NAMESPACE_FLAGS = 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 |
  0x40000000 | 0x00020000 | 0x00000080;

/**
 * The settings this sandbox reproduces (or that do not restrict the process:
 * start-up, restart and install settings). A unit with any other setting is
 * refused, so a new restriction cannot pass the test unapplied.
 */
const REPRODUCED = new Set([
  "Description",
  "Documentation",
  "Wants",
  "After",
  "WantedBy",
  "Type",
  "ExecStartPre",
  "ExecStart",
  "Restart",
  "RestartSec",
  "LimitNOFILE",
  "OOMScoreAdjust",
  "UMask",
  "CapabilityBoundingSet",
  "AmbientCapabilities",
  "NoNewPrivileges",
  "ProtectSystem",
  "ProtectHome",
  "PrivateTmp",
  "PrivateDevices",
  "PrivateMounts",
  "ProtectKernelTunables",
  "ReadWritePaths",
  "ProtectKernelModules",
  "ProtectKernelLogs",
  "ProtectControlGroups",
  "ProtectProc",
  "ProtectClock",
  "ProtectHostname",
  "RestrictAddressFamilies",
  "RestrictNamespaces",
  "LockPersonality",
  // Its system calls (sched_setscheduler…) are in @resources, which the filter denies.
  "RestrictRealtime",
  // Only forbids making SUID/SGID files; kproxy makes no file.
  "RestrictSUIDSGID",
  "SystemCallArchitectures",
  "SystemCallFilter",
  "SystemCallErrorNumber",
  "Environment",
]);

/** A command line that runs `command` under the unit's restrictions, in a new mount namespace. */
export interface SandboxedCommand {
  program: string;
  args: string[];
  /** Environment for the sandbox's shell (mount settings); merge with the command's. */
  env: Record<string, string>;
}

/**
 * Builds the command line that runs `command` under the unit. `visible` (a
 * host directory) appears read-only at `/srv` inside: put the program's files
 * there. Run it as root.
 *
 * @throws {TypeError} when the unit uses a setting this sandbox cannot reproduce
 */
export async function sandboxed(
  unit: string,
  options: { visible: string; command: string[] },
): Promise<SandboxedCommand> {
  const settings = unitSettings(unit);
  const unknown = [...settings.keys()].find((name) => !REPRODUCED.has(name));
  if (unknown !== undefined) throw new TypeError(`Cannot reproduce ${unknown}= without systemd`);
  const last = (name: string) => settings.get(name)?.at(-1);
  const required: [string, string][] = [
    ["ProtectSystem", "strict"],
    ["PrivateTmp", "yes"],
    ["PrivateDevices", "yes"],
    ["ProtectKernelTunables", "yes"],
    ["ProtectHome", "yes"],
    ["ProtectProc", "invisible"],
    ["NoNewPrivileges", "yes"],
  ];
  for (const [name, value] of required) {
    if (last(name) !== value) {
      throw new TypeError(`Cannot reproduce ${name}=${last(name) ?? ""}: expects ${value}`);
    }
  }
  const capabilities = (last("CapabilityBoundingSet") ?? "").split(/\s+/)
    .filter((cap) => cap !== "").map((cap) => cap.replace(/^CAP_/, "").toLowerCase());
  const capList = ["-all", ...capabilities.map((cap) => `+${cap}`)].join(",");
  const families = (last("RestrictAddressFamilies") ?? "").split(/\s+/).filter((f) => f !== "")
    .map((family) => {
      const number = ADDRESS_FAMILIES[family];
      if (number === undefined) throw new TypeError(`Cannot reproduce address family ${family}`);
      return number;
    });
  const spec = {
    allow: await allowedSyscalls(settings),
    errno: last("SystemCallErrorNumber") ?? "EPERM",
    families,
    namespaceFlags: last("RestrictNamespaces") === "yes" ? NAMESPACE_FLAGS : 0,
    lockPersonality: last("LockPersonality") === "yes",
  };
  return {
    program: "unshare",
    args: [
      "--mount",
      "--uts",
      "--propagation",
      "private",
      "sh",
      "-c",
      MOUNTS_SH,
      "sandbox",
      options.visible,
      "setpriv",
      "--no-new-privs",
      "--bounding-set",
      capList,
      "--inh-caps",
      capList,
      "--ambient-caps",
      capList,
      "python3",
      "-c",
      SECCOMP_PY,
      JSON.stringify(spec),
      ...options.command,
    ],
    env: {
      ...unitEnvironment(settings.get("Environment") ?? []),
      RW_PATHS: (settings.get("ReadWritePaths") ?? []).join(" "),
      UMASK: last("UMask") ?? "0022",
      NOFILE: last("LimitNOFILE") ?? "1024",
      OOM_SCORE_ADJ: last("OOMScoreAdjust") ?? "",
    },
  };
}
