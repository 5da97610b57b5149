import assert from "node:assert/strict";
import { parseCommandLine } from "../../lib/config/command_line.ts";
import { ConfigError } from "../../lib/config/values.ts";

const HEADER = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n";

function parse(argv: string[], file?: string) {
  const files: Record<string, string> = file === undefined ? {} : { "/cfg.yaml": file };
  return parseCommandLine(file === undefined ? argv : ["--config=/cfg.yaml", ...argv], {
    readTextFile: (path) => files[path]!,
    hostname: () => "node-a",
  });
}

Deno.test("feature gates: a cluster-wide gate list is accepted as kube-proxy 1.36 accepts it", async (t) => {
  await t.step("in the file", () => {
    const line = parse(
      [],
      `${HEADER}featureGates:\n  InPlacePodVerticalScaling: true\n  AllAlpha: false\n` +
        "  AllBeta: false\n  ContextualLogging: true\n  DynamicResourceAllocation: true\n",
    );
    assert.equal(line.config.featureGates.InPlacePodVerticalScaling, true);
    assert.equal(line.config.featureGates.ContextualLogging, true);
  });
  await t.step("on the command line", () => {
    const line = parse(["--feature-gates=AllAlpha=false,InPlacePodVerticalScaling=true"]);
    assert.equal(line.config.featureGates.InPlacePodVerticalScaling, true);
  });
});

Deno.test("feature gates: AllAlpha and AllBeta set every unset gate of their stage", () => {
  const on = parse(["--feature-gates=AllAlpha=true,NativeHistograms=false"]).config.featureGates;
  assert.equal(on.NativeHistograms, false, "an explicit value wins");
  assert.equal(on.RuntimeClassInImageCriApi, true, "an alpha gate follows AllAlpha");
  assert.equal(on.ContextualLogging, true, "a beta gate keeps its default");
  const off = parse(["--feature-gates=AllBeta=false"]).config.featureGates;
  assert.equal(off.ContextualLogging, false);
  assert.equal(off.NFTablesProxyMode, true, "GA gates are not beta");
});

Deno.test("feature gates: every gate starts at its 1.36 default", () => {
  const gates = parse([]).config.featureGates;
  assert.equal(gates.NFTablesProxyMode, true);
  assert.equal(gates.WinDSR, true);
  assert.equal(gates.NativeHistograms, false);
  assert.equal(gates.ServiceTopology, false, "kproxy's own gate (seed 002)");
});

Deno.test("feature gates: an unknown gate is logged and ignored, as kube-proxy does", () => {
  const line = parse(["--feature-gates=NoSuchGate=true"]);
  assert.equal(line.config.featureGates.NoSuchGate, undefined);
  assert.ok(line.warnings.some((w) => w.includes("unrecognized feature gate: NoSuchGate")));
});

Deno.test("feature gates: refuses what kube-proxy refuses", async (t) => {
  const cases: [string, string[], string | undefined, string, RegExp][] = [
    [
      "a locked gate set away from its default",
      ["--feature-gates=NFTablesProxyMode=false"],
      undefined,
      "--feature-gates",
      /cannot set feature gate NFTablesProxyMode to false, feature is locked to true/,
    ],
    [
      "a locked gate in the file",
      [],
      `${HEADER}featureGates:\n  MultiCIDRServiceAllocator: false\n`,
      "featureGates",
      /locked to true/,
    ],
    [
      "an enabled gate whose dependency is off",
      ["--feature-gates=InPlacePodVerticalScalingInitContainers=true,NodeDeclaredFeatures=false"],
      undefined,
      "--feature-gates",
      /InPlacePodVerticalScalingInitContainers is enabled, but depends on features that are disabled: \[NodeDeclaredFeatures\]/,
    ],
    [
      "a value that is not a boolean",
      ["--feature-gates=AllAlpha=maybe"],
      undefined,
      "--feature-gates",
      /not a boolean/,
    ],
  ];
  for (const [name, argv, file, field, pattern] of cases) {
    await t.step(name, () => {
      assert.throws(() => parse(argv, file), (error: unknown) => {
        assert.ok(error instanceof ConfigError, String(error));
        assert.equal(error.field, field);
        assert.match(error.message, pattern);
        return true;
      });
    });
  }
});

Deno.test("FEATURE_GATES: every dependency is a registered gate, and defaults satisfy them", async () => {
  const { FEATURE_GATES } = await import("../../lib/config/feature_gates.ts");
  for (const [name, spec] of Object.entries(FEATURE_GATES)) {
    for (const dependency of spec.dependsOn ?? []) {
      assert.ok(Object.hasOwn(FEATURE_GATES, dependency), `${name} depends on ${dependency}`);
    }
  }
  assert.ok(Object.keys(FEATURE_GATES).length > 200, "all of Kubernetes' gates, not a few");
});
