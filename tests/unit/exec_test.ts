import assert from "node:assert/strict";
import {
  CommandError,
  DenoExecutor,
  isMissingProgram,
  runChecked,
  STDIN_CHUNK,
  stdinWrites,
} from "../../lib/shell/exec.ts";
import { FakeExecutor } from "../support/fake_executor.ts";
import { ANY_ARGUMENTS } from "../../lib/shell/command_policy.ts";
import { readSysctl, setSysctls } from "../../lib/shell/sysctl.ts";
import { MALLOC_TUNABLES } from "../../lib/shell/child_env.ts";

const TEST_PROGRAMS = ["sh", "cat", "kp-no-such-program"];
const shellExecutor = new DenoExecutor({
  allowedPrograms: TEST_PROGRAMS,
  policy: Object.fromEntries(TEST_PROGRAMS.map((program) => [program, ANY_ARGUMENTS])),
});

Deno.test("DenoExecutor.run() refuses a program outside the allow-list without spawning", async () => {
  const marker = await Deno.makeTempFile();
  await Deno.remove(marker);
  const executor = new DenoExecutor({ allowedPrograms: ["nft"] });
  await assert.rejects(
    executor.run({ program: "touch", args: [marker] }),
    (e: unknown) =>
      e instanceof CommandError && /not in the allowed programs/.test(e.message) &&
      e.result === undefined,
  );
  await assert.rejects(Deno.stat(marker), Deno.errors.NotFound);
});

Deno.test("DenoExecutor.run() pipes stdin and captures stdout", async () => {
  const result = await shellExecutor.run({ program: "cat", args: [], stdin: "hello\nworld\n" });
  assert.deepEqual(result, { code: 0, stdout: "hello\nworld\n", stderr: "" });
});

Deno.test("DenoExecutor.run() writes a stdin larger than one chunk whole, surrogate pairs intact", async () => {
  // 65535 ASCII characters put the emoji's surrogate pair across the 64 KiB chunk boundary.
  const stdin = `${"a".repeat(65_535)}\u{1F600}${"b\n".repeat(100_000)}`;
  const result = await shellExecutor.run({ program: "cat", args: [], stdin });
  assert.equal(result.stdout.length, stdin.length);
  assert.equal(result.stdout, stdin);
});

Deno.test("DenoExecutor.run() hands stdout to onStdoutLine line by line, never whole", async () => {
  let count = 0;
  let last = "";
  let longest = 0;
  const result = await shellExecutor.run({
    program: "sh",
    // 200k lines cross many pipe reads; the last has no newline; stderr is kept.
    args: ["-c", "seq 1 200000; printf 'tail'; echo oops >&2; exit 1"],
    onStdoutLine: (line) => {
      count++;
      last = line;
      longest = Math.max(longest, line.length);
    },
  });
  assert.deepEqual(result, { code: 1, stdout: "", stderr: "oops\n" });
  assert.equal(count, 200_001);
  assert.equal(last, "tail");
  assert.equal(longest, 6);
});

Deno.test("DenoExecutor.run() kills the program when onStdoutLine throws", async () => {
  await assert.rejects(
    shellExecutor.run({
      program: "sh",
      args: ["-c", "yes"],
      onStdoutLine: () => {
        throw new Error("enough");
      },
    }),
    /enough/,
  );
});

Deno.test("DenoExecutor.run() leaves no memory behind per command: 1000 runs add < 40 MiB resident", async () => {
  // Deno's `ChildProcess.output()` left ~150 MiB of freed but resident glibc
  // heap after 1000 commands (~250 MiB after 7000): a node's kproxy runs one
  // per sync. Measured in a process of its own, after full collections.
  const script = new URL("../support/command_memory.ts", import.meta.url).pathname;
  const output = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "--allow-run=cat",
      "--allow-env",
      "--v8-flags=--expose-gc",
      script,
      "--commands=1000",
    ],
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.ok(output.success, new TextDecoder().decode(output.stderr));
  const { beforeMiB, afterMiB } = JSON.parse(new TextDecoder().decode(output.stdout));
  assert.ok(
    afterMiB - beforeMiB < 40,
    `resident ${beforeMiB.toFixed(1)} MiB before 1000 commands, ${afterMiB.toFixed(1)} after`,
  );
});

Deno.test("stdinWrites() yields the pieces as written: each given piece cut every STDIN_CHUNK units", () => {
  const long = `${"a".repeat(STDIN_CHUNK - 1)}\u{1F600}${"b".repeat(STDIN_CHUNK)}`;
  const writes = [...stdinWrites(["head\n", long, ""])];
  assert.deepEqual(writes.map((piece) => piece.length), [5, STDIN_CHUNK + 1, STDIN_CHUNK]);
  assert.equal(writes.join(""), `head\n${long}`);
  assert.deepEqual([...stdinWrites("x")], ["x"]);
});

Deno.test("DenoExecutor.run() returns a non-zero exit as a result with stderr", async () => {
  const result = await shellExecutor.run({
    program: "sh",
    args: ["-c", "echo oops >&2; exit 3"],
  });
  assert.deepEqual(result, { code: 3, stdout: "", stderr: "oops\n" });
});

Deno.test("DenoExecutor.run() runs programs with glibc's malloc tunables for a huge-page heap", async () => {
  const result = await shellExecutor.run({
    program: "sh",
    args: ["-c", 'printf %s "$GLIBC_TUNABLES"'],
  });
  assert.equal(result.stdout, MALLOC_TUNABLES);
});

Deno.test("DenoExecutor.run() passes arguments without a shell", async () => {
  const result = await shellExecutor.run({
    program: "sh",
    args: ["-c", 'printf "%s|" "$@"', "sh", "a b", "$HOME", ";rm"],
  });
  assert.equal(result.stdout, "a b|$HOME|;rm|");
});

Deno.test("DenoExecutor.run() kills a program after its timeout", async () => {
  const started = Date.now();
  await assert.rejects(
    shellExecutor.run({ program: "sh", args: ["-c", "exec sleep 10"], timeoutMs: 100 }),
    (e: unknown) =>
      e instanceof CommandError && /killed after 100 ms timeout/.test(e.message) &&
      e.result !== undefined,
  );
  assert.ok(Date.now() - started < 5000);
});

Deno.test("DenoExecutor.run() reports a missing binary clearly", async () => {
  await assert.rejects(
    shellExecutor.run({ program: "kp-no-such-program", args: [] }),
    (e: unknown) =>
      e instanceof CommandError && e.message.includes("kp-no-such-program") &&
      /not found/.test(e.message),
  );
});

Deno.test("runChecked() throws with stderr on a non-zero exit and returns on success", async () => {
  await assert.rejects(
    runChecked(shellExecutor, { program: "sh", args: ["-c", "echo bad rule >&2; exit 1"] }),
    (e: unknown) =>
      e instanceof CommandError && e.message.includes("bad rule") &&
      e.message.includes("exit status 1") && e.result?.code === 1,
  );
  const ok = await runChecked(shellExecutor, { program: "sh", args: ["-c", "echo fine"] });
  assert.equal(ok.stdout, "fine\n");
});

Deno.test("FakeExecutor records calls and answers from the queue, then the handler", async () => {
  const fake = new FakeExecutor((command) => ({
    code: 0,
    stdout: `handled ${command.program}`,
    stderr: "",
  }));
  fake.reply({ code: 1, stderr: "first" }, new Error("second"));
  assert.deepEqual(await fake.run({ program: "nft", args: ["-f", "-"], stdin: "x" }), {
    code: 1,
    stdout: "",
    stderr: "first",
  });
  await assert.rejects(fake.run({ program: "nft", args: [] }), /second/);
  assert.equal((await fake.run({ program: "ip", args: [] })).stdout, "handled ip");
  assert.deepEqual(fake.calls.map((c) => c.program), ["nft", "nft", "ip"]);
  assert.equal(fake.calls[0]?.stdin, "x");
});

Deno.test("FakeExecutor hands a reply's stdout to onStdoutLine", async () => {
  const lines: string[] = [];
  const fake = new FakeExecutor().reply({ stdout: "a\n\nb\n" });
  const result = await fake.run({ program: "x", args: [], onStdoutLine: (l) => lines.push(l) });
  assert.deepEqual(lines, ["a", "", "b"]);
  assert.equal(result.stdout, "");
});

Deno.test("FakeExecutor answers exit 0 with no output by default", async () => {
  const fake = new FakeExecutor();
  assert.deepEqual(await fake.run({ program: "nft", args: [] }), {
    code: 0,
    stdout: "",
    stderr: "",
  });
});

Deno.test("setSysctls() runs sysctl -w per entry after validating all of them", async () => {
  const fake = new FakeExecutor();
  await setSysctls(fake, {
    "net.ipv4.conf.all.route_localnet": "1",
    "net.netfilter.nf_conntrack_tcp_be_liberal": "1",
  });
  assert.deepEqual(fake.calls.map((c) => [c.program, ...c.args]), [
    ["sysctl", "-w", "net.ipv4.conf.all.route_localnet=1"],
    ["sysctl", "-w", "net.netfilter.nf_conntrack_tcp_be_liberal=1"],
  ]);
});

Deno.test("setSysctls() rejects unsafe keys and values without running anything", async (t) => {
  const cases: Record<string, string>[] = [
    { "net.ipv4.ip_forward": "1", "../etc/passwd": "1" },
    { "net.ipv4.ip_forward": "1; reboot" },
    { "net": "1" },
    { "net.ipv4.ip_forward": "" },
  ];
  for (const entries of cases) {
    await t.step(JSON.stringify(entries), async () => {
      const fake = new FakeExecutor();
      await assert.rejects(setSysctls(fake, entries), TypeError);
      assert.deepEqual(fake.calls, []);
    });
  }
});

Deno.test("setSysctls() throws CommandError when sysctl fails", async () => {
  const fake = new FakeExecutor().reply({ code: 255, stderr: "permission denied" });
  await assert.rejects(
    setSysctls(fake, { "net.ipv4.ip_forward": "1" }),
    (e: unknown) => e instanceof CommandError && e.message.includes("permission denied"),
  );
});

Deno.test("readSysctl() returns the trimmed value of sysctl -n", async () => {
  const fake = new FakeExecutor().reply({ stdout: "1\n" });
  assert.equal(await readSysctl(fake, "net.ipv4.ip_forward"), "1");
  assert.deepEqual(fake.calls[0]?.args, ["-n", "net.ipv4.ip_forward"]);
});

Deno.test("isMissingProgram() knows a program ip netns exec could not find, and nothing else", () => {
  const netns = (program: string, stderr: string, code = 1) =>
    new CommandError(
      { program: "ip", args: ["netns", "exec", "kp-x", program, "list"] },
      { code, stdout: "", stderr },
      `Cannot run "ip netns exec kp-x ${program} list": exit status ${code}: ${stderr.trim()}`,
    );
  assert.equal(
    isMissingProgram(netns("nfacct", 'exec of "nfacct" failed: No such file or directory\n')),
    true,
  );
  assert.equal(isMissingProgram(netns("nfacct", "nfacct: Operation not permitted\n")), false);
  assert.equal(
    isMissingProgram(
      new CommandError(
        { program: "nfacct", args: ["list"] },
        { code: 1, stdout: "", stderr: 'exec of "nfacct" failed: No such file or directory\n' },
        "a program that prints those words itself",
      ),
    ),
    false,
  );
  assert.equal(
    isMissingProgram(
      new CommandError(
        { program: "nfacct", args: [] },
        undefined,
        'Cannot run "nfacct": program not found in PATH',
      ),
    ),
    true,
  );
});
