/**
 * Runs `service_scripts.Tests.ps1` (the Windows service scripts and the
 * service host, under Pester 6.2.0 in PowerShell 7) and reports each Pester
 * test as a step.
 *
 * @module
 */

import { ok } from "node:assert/strict";
import { PESTER_MODULES, PESTER_VERSION, pwshPath, runPwsh, testFile } from "./hcn.ts";

const pwsh = await pwshPath();
const pester = `${PESTER_MODULES}/Pester/${PESTER_VERSION}/Pester.psd1`;
const hasPester = await Deno.stat(pester).then(() => true, () => false);
if (pwsh && !hasPester) {
  console.warn(
    `Pester tests skipped: no Pester ${PESTER_VERSION} at ${pester} (.ci/run installs it)`,
  );
}

const RUN = `$ErrorActionPreference = 'Stop'
Import-Module '${pester}'
$configuration = New-PesterConfiguration
$configuration.Run.Path = '${testFile("service_scripts.Tests.ps1")}'
$configuration.Run.PassThru = $true
$configuration.Output.Verbosity = 'None'
$result = Invoke-Pester -Configuration $configuration
$tests = foreach ($test in $result.Tests) {
  [ordered]@{
    name = ($test.ExpandedPath -replace '\\s+', ' ')
    result = [string]$test.Result
    error = (@($test.ErrorRecord) | ForEach-Object { [string]$_ }) -join '; '
  }
}
ConvertTo-Json -Compress -Depth 3 -InputObject @($tests)
`;

Deno.test({
  name: "Windows service scripts (pwsh, Pester)",
  ignore: !pwsh || !hasPester,
  async fn(t) {
    const result = await runPwsh({ pwsh: pwsh!, libraryDir: "" }, RUN);
    ok(result.code === 0, result.stderr);
    const tests: { name: string; result: string; error: string }[] = JSON.parse(
      result.stdout.trim().split("\n").at(-1)!,
    );
    ok(tests.length >= 20, `only ${tests.length} Pester tests ran`);
    for (const test of tests) {
      await t.step(test.name, () => {
        ok(test.result === "Passed", `${test.result}: ${test.error}`);
      });
    }
  },
});
