/**
 * /statusz of a running kproxy, over HTTP and in headless Chromium. The
 * screenshot is kept as docs/statusz.png (rewritten with `-- --update`).
 */
import assert from "node:assert/strict";
import { RecordingBackend } from "../support/recording_backend.ts";
import { main, type RunningApp } from "../../lib/commands/app.ts";

const ROOT = new URL("../../", import.meta.url).pathname;
const CHROMIUM = "/usr/bin/chromium";
const UPDATE = Deno.args.includes("--update");

function exists(path: string): boolean {
  try {
    Deno.statSync(path);
    return true;
  } catch {
    return false;
  }
}

/** Runs kproxy in-process on the shipped manifests with a recording backend. */
async function withRunningKproxy(
  fn: (statusUrl: string, churn: (times: number) => Promise<void>) => Promise<void>,
) {
  const backend = new RecordingBackend({ mode: "nftables" });
  const manifests = await Deno.makeTempDir({ prefix: "kproxy-statusz-" });
  for await (const entry of Deno.readDir(`${ROOT}scripts/manifests`)) {
    await Deno.copyFile(`${ROOT}scripts/manifests/${entry.name}`, `${manifests}/${entry.name}`);
  }
  const web = await Deno.readTextFile(`${manifests}/10-web.yaml`);
  const waitForSyncs = async (count: number) => {
    const deadline = Date.now() + 10_000;
    while (backend.applied.length < count) {
      if (Date.now() > deadline) throw new Error(`kproxy did not reach ${count} syncs`);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  };
  const churn = async (times: number) => {
    for (let i = 1; i <= times; i++) {
      await Deno.writeTextFile(
        `${manifests}/10-web.yaml`,
        web.replace(
          /10\.244\.2\.10\b/,
          `10.244.2.${100 + i}`,
        ),
      );
      await waitForSyncs(backend.applied.length + 1);
    }
  };
  const controller = new AbortController();
  let app: RunningApp | undefined;
  let started = () => {};
  const ready = new Promise<void>((resolve) => (started = resolve));
  const exited = main([
    ...["--manifests", manifests, "--hostname-override", "node-a"],
    "--cluster-cidr=10.244.0.0/16",
    "--proxy-mode=nftables",
    "--nftables-min-sync-period=0s",
    "--healthz-bind-address=127.0.0.1:0",
    "--metrics-bind-address=127.0.0.1:0",
  ], {
    backend,
    signal: controller.signal,
    handleSignals: false,
    setupLogging: false,
    serviceHealthHostname: "127.0.0.1",
    io: { stdout: () => {}, stderr: () => {} },
    onStarted: (running) => {
      app = running;
      started();
    },
  });
  await ready;
  try {
    await waitForSyncs(1);
    await fn(`http://127.0.0.1:${app!.metricsServer!.addr.port}/statusz`, churn);
  } finally {
    controller.abort();
    assert.equal(await exited, 0);
    await Deno.remove(manifests, { recursive: true });
  }
}

Deno.test("/statusz serves JSON and HTML describing the last syncs", async () => {
  await withRunningKproxy(async (url, churn) => {
    await churn(2);
    const json = await (await fetch(`${url}?format=json`)).json();
    assert.equal(json.mode, "nftables");
    assert.equal(json.node, "node-a");
    assert.ok(json.totalSyncs >= 3);
    assert.ok(json.families.ipv4.services > 5);
    const html = await (await fetch(url)).text();
    assert.match(html, /<svg/);
    assert.match(html, /node-a/);
  });
});

const chromiumMissing = exists(CHROMIUM) ? undefined : `${CHROMIUM} is not installed`;
if (chromiumMissing) console.log(`Skipping the /statusz browser test: ${chromiumMissing}`);

Deno.test({
  name: "/statusz renders in headless Chromium",
  ignore: chromiumMissing !== undefined,
  async fn() {
    await withRunningKproxy(async (url, churn) => {
      await churn(12);
      const profile = await Deno.makeTempDir({ prefix: "kproxy-chromium-" });
      const screenshot = `${profile}/statusz.png`;
      const chromium = (...args: string[]) =>
        new Deno.Command(CHROMIUM, {
          args: [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            `--user-data-dir=${profile}`,
            ...args,
            url,
          ],
          stdout: "piped",
          stderr: "piped",
          signal: AbortSignal.timeout(60_000),
        }).output();
      try {
        const dom = await chromium("--dump-dom");
        const text = new TextDecoder().decode(dom.stdout);
        assert.ok(dom.success, new TextDecoder().decode(dom.stderr));
        assert.match(text, /nftables/);
        assert.match(text, /default\/web|services/i);
        const shot = await chromium(`--screenshot=${screenshot}`, "--window-size=1200,900");
        assert.ok(shot.success, new TextDecoder().decode(shot.stderr));
        const png = await Deno.readFile(screenshot);
        assert.deepEqual([...png.subarray(1, 4)], [0x50, 0x4e, 0x47], "a PNG file");
        assert.ok(png.length > 10_000, "the screenshot shows a page");
        if (UPDATE || !exists(`${ROOT}docs/statusz.png`)) {
          await Deno.copyFile(screenshot, `${ROOT}docs/statusz.png`);
        }
      } finally {
        await Deno.remove(profile, { recursive: true });
      }
    });
  },
});
