import assert from "node:assert/strict";
import { unitEnvironment, unitSettings } from "../support/systemd_sandbox.ts";

const UNIT = new URL("../../scripts/systemd/kproxy.service", import.meta.url);

Deno.test("unitEnvironment() reads a unit's Environment= assignments, quoted or not", () => {
  assert.deepEqual(
    unitEnvironment(["A=1 B=", '"C=two words" D=x=y']),
    { A: "1", B: "", C: "two words", D: "x=y" },
  );
});

Deno.test("the shipped systemd unit starts kproxy with Deno's default root store empty", async () => {
  const settings = unitSettings(await Deno.readTextFile(UNIT));
  assert.equal(unitEnvironment(settings.get("Environment") ?? []).DENO_TLS_CA_STORE, "");
});
