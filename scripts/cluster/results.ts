/**
 * Two e2e runs side by side, from the JUnit reports `e2e.test --report-dir` writes: a Markdown
 * table (test, each proxy's result), the totals, and the first line of each failure.
 * Tests that focus and skip left out of both runs are omitted.
 *
 * ```sh
 * deno run --allow-read scripts/cluster/results.ts /tmp/kproxy-cluster/results/kube-proxy \
 *   /tmp/kproxy-cluster/results/kproxy
 * ```
 *
 * @module
 */

/** One test's outcome in one run. */
export interface Outcome {
  result: "pass" | "FAIL" | "skip";
  detail: string;
}

const SUITE_NODES = /^\[(Synchronized|Report)(Before|After)Suite\]/;

function attribute(tag: string, name: string): string | undefined {
  const match = tag.match(new RegExp(`\\b${name}="([^"]*)"`));
  return match ? unescapeXml(match[1]!) : undefined;
}

function unescapeXml(text: string): string {
  return text.replace(
    /&(lt|gt|quot|apos|amp|#(\d+)|#x([0-9a-f]+));/gi,
    (_, name, dec, hex) =>
      dec
        ? String.fromCodePoint(Number(dec))
        : hex
        ? String.fromCodePoint(parseInt(hex, 16))
        : ({ lt: "<", gt: ">", quot: '"', apos: "'", amp: "&" } as Record<string, string>)[name]!,
  );
}

/** Every test case of one JUnit report, by name. */
export function parseJunit(xml: string): Map<string, Outcome> {
  const outcomes = new Map<string, Outcome>();
  const cases = xml.matchAll(/<testcase\b([^>]*?)(\/>|>([\s\S]*?)<\/testcase>)/g);
  for (const [, attributes, , body = ""] of cases) {
    const name = attribute(attributes!, "name") ?? "";
    const failure = body.match(/<(failure|error)\b([^>]*)>/);
    const skipped = body.match(/<skipped\b([^>]*)\/?>/);
    if (SUITE_NODES.test(name) && !failure) continue;
    if (failure) {
      outcomes.set(name, { result: "FAIL", detail: attribute(failure[2]!, "message") ?? "" });
    } else if (skipped) {
      const message = attribute(skipped[1]!, "message") ?? "";
      // left out by focus or skip, not skipped by the test itself
      if (message === "" || message === "skipped") continue;
      outcomes.set(name, { result: "skip", detail: message });
    } else {
      const seconds = Number(attribute(attributes!, "time") ?? 0);
      outcomes.set(name, { result: "pass", detail: `${seconds.toFixed(0)}s` });
    }
  }
  return outcomes;
}

function firstLine(message: string): string {
  const line = message.split("\n").map((l) => l.trim().replace(/^\[FAILED\]\s*/, ""))
    .find((l) => l.length > 0) ?? "";
  return line.replace(/\s+/g, " ").replace(/\|/g, "\\|").slice(0, 240);
}

function shortName(name: string): string {
  return name.replace("[It] ", "").replace(/^\[sig-network\] /, "");
}

/** The Markdown table of runs, in the order given, with their labels. */
export function comparisonTable(runs: { label: string; outcomes: Map<string, Outcome> }[]): string {
  const names = [...new Set(runs.flatMap((run) => [...run.outcomes.keys()]))].sort();
  const lines = [
    `| test | ${runs.map((run) => run.label).join(" | ")} |`,
    `| --- |${runs.map(() => " --- |").join("")}`,
  ];
  for (const name of names) {
    const cells = runs.map((run) => {
      const outcome = run.outcomes.get(name);
      if (!outcome) return "–";
      return outcome.result === "FAIL" ? `FAIL: ${firstLine(outcome.detail)}` : outcome.result;
    });
    lines.push(`| ${shortName(name).replace(/\|/g, "\\|")} | ${cells.join(" | ")} |`);
  }
  lines.push("");
  for (const run of runs) {
    const count = (result: Outcome["result"]) =>
      [...run.outcomes.values()].filter((o) => o.result === result).length;
    lines.push(
      `${run.label}: ${count("pass")} passed, ${count("FAIL")} failed, ${count("skip")} skipped`,
    );
  }
  const skips = names.flatMap((name) => {
    const skip = runs.map((run) => run.outcomes.get(name)).find((o) => o?.result === "skip");
    return skip ? [`- ${shortName(name)}: ${firstLine(skip.detail)}`] : [];
  });
  if (skips.length > 0) lines.push("", "Skipped by the tests themselves:", ...skips);
  return lines.join("\n");
}

async function readRun(directory: string): Promise<Map<string, Outcome>> {
  const outcomes = new Map<string, Outcome>();
  for await (const entry of Deno.readDir(directory)) {
    if (!/^junit.*\.xml$/.test(entry.name)) continue;
    const parsed = parseJunit(await Deno.readTextFile(`${directory}/${entry.name}`));
    for (const [name, outcome] of parsed) outcomes.set(name, outcome);
  }
  return outcomes;
}

if (import.meta.main) {
  if (Deno.args.length < 1) {
    console.error("usage: results.ts RUN_DIR [RUN_DIR...]   (label = the directory's name)");
    Deno.exit(2);
  }
  const runs = [];
  for (const directory of Deno.args) {
    runs.push({
      label: directory.replace(/\/$/, "").split("/").pop()!,
      outcomes: await readRun(directory),
    });
  }
  console.log(comparisonTable(runs));
}
