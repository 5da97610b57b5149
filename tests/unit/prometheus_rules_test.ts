import assert from "node:assert/strict";

const RULES = new URL("../../scripts/deploy/prometheus-rules.yaml", import.meta.url).pathname;
const CASES = new URL("./prometheus_rules_test.yaml", import.meta.url).pathname;

const promtool = await new Deno.Command("promtool", { args: ["--version"], stdout: "null" })
  .output().then((output) => output.success, () => false);
if (!promtool) {
  console.warn("promtool tests ignored: promtool (Debian package prometheus) is not installed");
}

async function runPromtool(...args: string[]): Promise<string> {
  const output = await new Deno.Command("promtool", { args, stdout: "piped", stderr: "piped" })
    .output();
  const text = new TextDecoder().decode(output.stdout) + new TextDecoder().decode(output.stderr);
  assert.ok(output.success, text);
  return text;
}

Deno.test({
  name: "promtool check rules accepts scripts/deploy/prometheus-rules.yaml",
  ignore: !promtool,
  async fn() {
    assert.match(await runPromtool("check", "rules", RULES), /SUCCESS: 6 rules found/);
  },
});

Deno.test({
  name: "promtool test rules: each alert fires when it should and stays quiet otherwise",
  ignore: !promtool,
  async fn() {
    assert.match(await runPromtool("test", "rules", CASES), /SUCCESS/);
  },
});
