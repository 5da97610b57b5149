/**
 * A node whose apiserver is not reachable yet (a new or rebooted node, the
 * control plane still starting): kproxy must stay live, as kube-proxy does,
 * so that its liveness probe does not restart it forever, and turn ready
 * once it has synced.
 *
 * @module
 */

import assert from "node:assert/strict";
import { RecordingBackend } from "../support/recording_backend.ts";
import { main, type RunningApp } from "../../lib/commands/app.ts";
import { FakeApiServer, writeKubeconfig } from "../../scripts/testbed/fake_apiserver.ts";

async function status(url: string): Promise<number> {
  const response = await fetch(url);
  await response.body?.cancel();
  return response.status;
}

async function waitFor(predicate: () => Promise<boolean>, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await predicate())) {
    if (Date.now() > deadline) throw new Error(`Timed out after ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

Deno.test("main() stays live while the apiserver is unreachable at start, and ready once synced", async () => {
  const server = await FakeApiServer.start();
  server.upsert("nodes", { metadata: { name: "node-a" } });
  const kubeconfig = await writeKubeconfig(server);
  await server.stop();
  const backend = new RecordingBackend({ mode: "nftables" });
  const controller = new AbortController();
  const stderr: string[] = [];
  let app: RunningApp | undefined;
  let onStarted = () => {};
  const started = new Promise<void>((resolve) => (onStarted = resolve));
  const exitCode = main([
    "--kubeconfig",
    kubeconfig,
    "--hostname-override",
    "node-a",
    "--nftables-sync-period=1s",
    "--healthz-bind-address=127.0.0.1:0",
    "--metrics-bind-address=",
  ], {
    backend,
    signal: controller.signal,
    handleSignals: false,
    setupLogging: false,
    serviceHealthHostname: "127.0.0.1",
    io: { stdout: () => {}, stderr: (text) => stderr.push(text) },
    onStarted: (running) => {
      app = running;
      onStarted();
    },
  });
  await started;
  try {
    const health = `http://127.0.0.1:${app!.healthServer!.addr.port}`;
    // Well past the health timeout (2 × syncPeriod) with nothing listed.
    await new Promise((resolve) => setTimeout(resolve, 3_000));
    assert.equal(await status(`${health}/livez`), 200);
    assert.equal(await status(`${health}/healthz`), 503);
    assert.equal(backend.applied.length, 0);

    await server.restart();
    await waitFor(async () => await status(`${health}/healthz`) === 200, 20_000);
    assert.equal(await status(`${health}/livez`), 200);
    assert.ok(backend.applied.length > 0);
  } finally {
    controller.abort();
    await server.stop();
    await Deno.remove(kubeconfig);
  }
  assert.equal(await exitCode, 0, stderr.join(""));
});
