/**
 * Every PowerShell script kproxy ships or generates, parsed by PowerShell's own
 * parser (in pwsh): no parse errors, nothing Windows PowerShell 5.1 lacks (7-only
 * syntax, cmdlets and parameters; C# newer than C# 5 in Add-Type), and hostile
 * network names run no extra command. Replaces the earlier tree-sitter checks:
 * this is the real parser, and it also checks 5.1 compatibility.
 *
 * @module
 */

import { deepStrictEqual as assertEquals, ok } from "node:assert/strict";
import { diffHns } from "../../backends/windows/applier.ts";
import { renderWindows } from "../../backends/windows/render.ts";
import {
  type HnsChanges,
  renderListScript,
  renderSyncScript,
} from "../../backends/windows/script.ts";
import { SCENARIOS } from "../golden/ipvs/plans.ts";
import { pwshPath, runPwsh, testFile } from "./hcn.ts";

const pwsh = await pwshPath();

interface Checked {
  name: string;
  problems: string[];
  commands: string[];
}

async function check(scripts: { name: string; text: string }[]): Promise<Map<string, Checked>> {
  const result = await runPwsh(
    { pwsh: pwsh!, libraryDir: "" },
    JSON.stringify(scripts),
    { args: ["-NoProfile", "-NonInteractive", "-File", testFile("ps51_check.ps1")] },
  );
  assertEquals(result.code, 0, result.stderr);
  const checked: Checked[] = JSON.parse(result.stdout);
  return new Map(checked.map((c) => [c.name, c]));
}

function allChanges(plan: (typeof SCENARIOS)[string]): HnsChanges {
  // Overlay with every object kind: provider addresses, the host-MAC endpoints, health checks.
  const state = renderWindows(plan, {
    dsr: true,
    sourceVip: plan.family === "IPv4" ? "10.244.1.2" : "",
    network: {
      type: "Overlay",
      remoteSubnets: [{ destinationPrefix: "10.244.2.0/24", providerAddress: "192.168.1.12" }],
    },
    nodeIP: plan.nodePortAddresses[0] ?? "",
    healthCheck: { rootEndpointName: "cbr0", healthzPort: 10256 },
  });
  const changes = diffHns({ loadBalancers: new Set(), endpoints: new Set() }, state);
  return {
    ...changes,
    deleteLoadBalancers: ["6b70726f-0001-0000-0000-00000000dead"],
    deleteEndpoints: ["6b70726f-0002-0000-0000-00000000dead"],
    replaceLoadBalancers: state.loadBalancers.slice(0, 1),
  };
}

const HOSTILE = [
  "x'; Remove-Item -Recurse C:\\ ; '",
  "$(Stop-Computer -Force)",
  "`$(whoami)`",
  "a;b|c&d",
  "line1\nRemove-Item C:\\\n",
  "\u2019; Stop-Computer; \u2018",
  "@'\nhere\n'@",
  "#comment",
];

function shipped(): { name: string; text: string }[] {
  const scripts = [
    { name: "list", text: renderListScript() },
    { name: "list with a network", text: renderListScript("vxlan0") },
  ];
  for (const [name, plan] of Object.entries(SCENARIOS)) {
    scripts.push({
      name: `sync ${name}`,
      text: renderSyncScript(allChanges(plan), { networkName: "cbr0" }),
    });
  }
  for (const file of ["install-service.ps1", "uninstall-service.ps1"]) {
    const url = new URL(`../../scripts/windows/${file}`, import.meta.url);
    scripts.push({ name: file, text: Deno.readTextFileSync(url) });
  }
  for (const name of HOSTILE) {
    scripts.push({
      name: `hostile ${JSON.stringify(name)}`,
      text: renderSyncScript(allChanges(SCENARIOS["etp-local"]!), { networkName: name }),
    });
  }
  return scripts;
}

Deno.test({
  name:
    "PowerShell parser (pwsh): every shipped and generated script is valid Windows PowerShell 5.1",
  ignore: pwsh === undefined,
  async fn(t) {
    const scripts = shipped();
    const checked = await check(scripts);
    for (const { name } of scripts.filter((s) => !s.name.startsWith("hostile"))) {
      await t.step(name, () => assertEquals(checked.get(name)?.problems, []));
    }
    await t.step("hostile network names parse and run no extra command", () => {
      const benign = checked.get("sync etp-local")!.commands;
      ok(benign.includes("New-KpLoadBalancer"));
      for (const name of HOSTILE) {
        const hostile = checked.get(`hostile ${JSON.stringify(name)}`)!;
        assertEquals(hostile.problems, [], name);
        assertEquals(hostile.commands, benign, name);
      }
    });
  },
});

Deno.test({
  name: "PowerShell parser (pwsh): the 5.1 check finds each 7-only construct",
  ignore: pwsh === undefined,
  async fn(t) {
    const snippets: Record<string, [string, RegExp]> = {
      "??": ["$a = $null ?? 1", /\?\? operator/],
      "??=": ["$a ??= 1", /\?\?= operator/],
      "?.": ["${a}?.Length", /\?\. operator/],
      "?[]": ["${a}?[0]", /\?\[\] operator/],
      "ternary": ["$b = $true ? 1 : 2", /ternary/],
      "&&": ["Get-Date && Get-Date", /pipeline chain/],
      "||": ["Get-Date || Get-Date", /pipeline chain/],
      "ForEach-Object -Parallel": ["1..2 | ForEach-Object -Parallel { $_ }", /-Parallel/],
      "% -Parallel": ["1..2 | % -Parallel { $_ }", /-Parallel/],
      "ConvertFrom-Json -AsHashtable": ["ConvertFrom-Json -AsHashtable '{}'", /-AsHashtable/],
      "clean block": ["function f { process { } clean { } }", /clean block/],
      "Test-Json": ["Test-Json -Json '{}'", /Test-Json/],
      "C# 6 string interpolation": [
        "Add-Type -TypeDefinition 'public class A { public string B() { return $\"x\"; } }'",
        /C# 5:/,
      ],
      "C# 7 out var": [
        "$s = @'\npublic class A { void B() { int.TryParse(\"1\", out var x); } }\n'@\nAdd-Type -TypeDefinition $s",
        /C# 5:/,
      ],
      "parse error": ["if (", /parse error/],
    };
    const checked = await check(
      Object.entries(snippets).map(([name, [text]]) => ({ name, text })),
    );
    for (const [name, [, expected]] of Object.entries(snippets)) {
      await t.step(name, () => {
        const problems = checked.get(name)!.problems;
        ok(problems.some((p) => expected.test(p)), `${name}: ${JSON.stringify(problems)}`);
      });
    }
  },
});
