import assert from "node:assert/strict";
import { getLogger, type LogLevel, type LogRecord, resetLogging } from "../../lib/core/logger.ts";
import { formatRecord, lowestLevelFor, setupLogging } from "../../lib/shell/log.ts";

/** 2026-11-23T09:30:00.123Z plus 456 microseconds. */
const TIMESTAMP = Date.UTC(2026, 10, 23, 9, 30, 0, 123) + 0.456;

function record(overrides: Partial<LogRecord> = {}): LogRecord {
  return {
    category: ["kproxy", "runner"],
    level: "info",
    timestamp: TIMESTAMP,
    message: ["Synced rules"],
    rawMessage: "Synced rules",
    properties: {},
    ...overrides,
  };
}

Deno.test("formatRecord() writes klog-like lines", async (t) => {
  const cases: [string, Partial<LogRecord>, string][] = [
    [
      "properties as key=value",
      { properties: { mode: "nftables", durationMs: 12 } },
      'I1123 09:30:00.123456 runner] "Synced rules" mode=nftables durationMs=12',
    ],
    ["no properties", {}, 'I1123 09:30:00.123456 runner] "Synced rules"'],
    ["trace letter", { level: "trace" }, 'T1123 09:30:00.123456 runner] "Synced rules"'],
    ["debug letter", { level: "debug" }, 'D1123 09:30:00.123456 runner] "Synced rules"'],
    ["warning letter", { level: "warning" }, 'W1123 09:30:00.123456 runner] "Synced rules"'],
    ["error letter", { level: "error" }, 'E1123 09:30:00.123456 runner] "Synced rules"'],
    ["fatal letter", { level: "fatal" }, 'F1123 09:30:00.123456 runner] "Synced rules"'],
    [
      "category tail",
      { category: ["kproxy", "backend", "nftables"] },
      'I1123 09:30:00.123456 nftables] "Synced rules"',
    ],
    ["root category", { category: [] }, 'I1123 09:30:00.123456 root] "Synced rules"'],
    [
      "zero-padded time",
      { timestamp: Date.UTC(2026, 0, 2, 3, 4, 5, 6) },
      'I0102 03:04:05.006000 runner] "Synced rules"',
    ],
    [
      "values with spaces or quotes quoted",
      { properties: { reason: "no endpoints", quote: 'say "hi"', empty: "" } },
      'I1123 09:30:00.123456 runner] "Synced rules" reason="no endpoints" ' +
      'quote="say \\"hi\\"" empty=""',
    ],
    [
      "booleans, null, arrays and objects",
      { properties: { ok: true, none: null, ips: ["10.0.0.1", "fd00::1"], port: { port: 80 } } },
      'I1123 09:30:00.123456 runner] "Synced rules" ok=true none=null ' +
      'ips=["10.0.0.1","fd00::1"] port={"port":80}',
    ],
    [
      "errors by message",
      { level: "error", properties: { error: new Error("nft: exit 1") } },
      'E1123 09:30:00.123456 runner] "Synced rules" error="nft: exit 1"',
    ],
    [
      "placeholders substituted and not repeated",
      {
        message: ["Skipping invalid service ", "default/web", ": ", "bad port", ""],
        rawMessage: "Skipping invalid service {key}: {reason}",
        properties: { key: "default/web", reason: "bad port", node: "n1" },
      },
      'I1123 09:30:00.123456 runner] "Skipping invalid service default/web: bad port" node=n1',
    ],
    [
      "message kept on one line",
      { message: ["line one\nline two"], rawMessage: "line one\nline two" },
      'I1123 09:30:00.123456 runner] "line one\\nline two"',
    ],
    [
      "non-string substitutions formatted",
      {
        message: ["Applied ", 42, " rules in ", { ms: 3 }, ""],
        rawMessage: "Applied {count} rules in {took}",
        properties: { count: 42, took: { ms: 3 } },
      },
      'I1123 09:30:00.123456 runner] "Applied 42 rules in {\\"ms\\":3}"',
    ],
  ];
  for (const [name, overrides, want] of cases) {
    await t.step(name, () => assert.equal(formatRecord(record(overrides)), want));
  }
});

Deno.test("lowestLevelFor() mirrors kube-proxy's -v", () => {
  const cases: [number, LogLevel][] = [
    [0, "warning"],
    [1, "info"],
    [2, "info"],
    [3, "debug"],
    [4, "debug"],
    [5, "trace"],
    [10, "trace"],
  ];
  for (const [verbosity, want] of cases) assert.equal(lowestLevelFor(verbosity), want);
});

const LEVELS: LogLevel[] = ["trace", "debug", "info", "warning", "error"];

/** Logs one record per level from `kproxy.runner` and `kproxy.main`; returns "category:level" of each line written. */
async function shownAt(verbosity: number): Promise<string[]> {
  const lines: string[] = [];
  await setupLogging({ verbosity, sink: (line) => lines.push(line) });
  try {
    for (const area of ["runner", "main"]) {
      const logger = getLogger(["kproxy", area]);
      for (const level of LEVELS) logger[level]("{level} from {area}", { level, area });
    }
  } finally {
    resetLogging();
  }
  return lines.map((line) => {
    const match = / (\w+)\] "(\w+) from/.exec(line);
    return `${match?.[1]}:${match?.[2]}`;
  });
}

Deno.test("setupLogging() filters by verbosity", async (t) => {
  const cases: [number, string[]][] = [
    [0, ["runner:warning", "runner:error", "main:info", "main:warning", "main:error"]],
    [1, [
      "runner:info",
      "runner:warning",
      "runner:error",
      "main:info",
      "main:warning",
      "main:error",
    ]],
    [2, [
      "runner:info",
      "runner:warning",
      "runner:error",
      "main:info",
      "main:warning",
      "main:error",
    ]],
    [3, [
      "runner:debug",
      "runner:info",
      "runner:warning",
      "runner:error",
      "main:debug",
      "main:info",
      "main:warning",
      "main:error",
    ]],
    [5, [
      ...LEVELS.map((level) => `runner:${level}`),
      ...LEVELS.map((level) => `main:${level}`),
    ]],
  ];
  for (const [verbosity, want] of cases) {
    await t.step(`-v=${verbosity}`, async () => assert.deepEqual(await shownAt(verbosity), want));
  }
});

Deno.test("setupLogging() writes formatted lines", async () => {
  const lines: string[] = [];
  await setupLogging({ verbosity: 5, sink: (line) => lines.push(line) });
  try {
    getLogger(["kproxy", "runner"]).info("Synced rules", { mode: "nftables", durationMs: 12 });
  } finally {
    resetLogging();
  }
  assert.equal(lines.length, 1, lines.join("\n"));
  assert.match(
    lines[0]!,
    /^I\d{4} \d\d:\d\d:\d\d\.\d{6} runner\] "Synced rules" mode=nftables durationMs=12$/,
  );
});

Deno.test("setupLogging() rejects a negative or fractional verbosity", async () => {
  for (const verbosity of [-1, 1.5, Number.NaN]) {
    await assert.rejects(setupLogging({ verbosity, sink: () => {} }), RangeError);
  }
});
