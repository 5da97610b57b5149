/**
 * kproxy trusts only the cluster's CA for the apiserver, as client-go does:
 * a certificate from any other CA is refused even when the process's
 * default store trusts that CA (`DENO_CERT`, or the system store), and no
 * request (no token) reaches such a server. Checked for a kubeconfig and for
 * the in-cluster service account, on a real `deno run main.ts plan`, through
 * both transports: `node:https` (a default store) and Deno's own TLS client
 * (`DENO_TLS_CA_STORE=""`, as kproxy's launchers start it).
 *
 * @module
 */

import assert from "node:assert/strict";
import { FakeApiServer, writeKubeconfig } from "../../scripts/testbed/fake_apiserver.ts";
import {
  issueCertificate,
  type KeyPair,
  makeCertificateAuthority,
  opensslUnavailableReason,
} from "../../scripts/testbed/tls.ts";

const MAIN = new URL("../../main.ts", import.meta.url).pathname;

const skipReason = await opensslUnavailableReason();
if (skipReason) console.warn(`apiserver trust tests ignored: ${skipReason}`);

const inClusterSkipReason = skipReason ?? await (async () => {
  if (Deno.uid() !== 0) return "not root (the in-cluster test mounts a service account dir)";
  const probe = await new Deno.Command("unshare", { args: ["--mount", "true"], stderr: "null" })
    .output().catch(() => undefined);
  return probe?.success ? undefined : "unshare --mount does not work here";
})();
if (!skipReason && inClusterSkipReason) {
  console.warn(`in-cluster trust test ignored: ${inClusterSkipReason}`);
}

/** A finished or stopped child: exit code and what it printed. */
interface Outcome {
  code: number;
  stdout: string;
  stderr: string;
}

/**
 * Runs `program args` until it exits, or until its stderr matches `until`
 * (then kills it). Fails after 60 s.
 */
async function runUntil(
  program: string,
  args: string[],
  options: { env: Record<string, string>; until?: RegExp },
): Promise<Outcome> {
  const child = new Deno.Command(program, {
    args,
    env: { NO_COLOR: "1", RUST_BACKTRACE: "0", ...options.env },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const timer = setTimeout(() => child.kill("SIGKILL"), 60_000);
  let stderr = "";
  const reading = (async () => {
    for await (const text of child.stderr.pipeThrough(new TextDecoderStream())) {
      stderr += text;
      if (options.until?.test(stderr)) child.kill("SIGKILL");
    }
  })();
  const stdout = new Response(child.stdout).text();
  const { code } = await child.status;
  clearTimeout(timer);
  await reading;
  return { code, stdout: await stdout, stderr };
}

/** The apiserver refusal kproxy logs while it retries. */
const REFUSED = /Cannot list \w+, retrying/;

interface Fixture {
  dir: string;
  cluster: KeyPair;
  /** Environment of every child: the rogue CA is in the default store. */
  env: Record<string, string>;
  /** Serves a certificate from the rogue CA; kubeconfigs written for it name the cluster CA. */
  rogue: FakeApiServer;
  genuine: FakeApiServer;
}

async function withFixture(body: (fixture: Fixture) => Promise<void>): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "kp-trust-" });
  const cluster = await makeCertificateAuthority("cluster-ca");
  const rogueCA = await makeCertificateAuthority("rogue-ca");
  await Deno.writeTextFile(`${dir}/rogue-ca.pem`, rogueCA.cert);
  const rogue = await FakeApiServer.start({
    tls: { ...await issueCertificate(rogueCA), ca: cluster.cert },
  });
  const genuine = await FakeApiServer.start({
    tls: { ...await issueCertificate(cluster), ca: cluster.cert },
  });
  try {
    await body({ dir, cluster, env: { DENO_CERT: `${dir}/rogue-ca.pem` }, rogue, genuine });
  } finally {
    await rogue.stop();
    await genuine.stop();
    await Deno.remove(dir, { recursive: true });
  }
}

function planArgs(...extra: string[]): string[] {
  return ["run", "--allow-all", MAIN, "plan", "--hostname-override", "node-a", ...extra];
}

Deno.test({
  name: "kproxy trusts only the kubeconfig's CA for the apiserver, not DENO_CERT",
  ignore: skipReason !== undefined,
  async fn(t) {
    await withFixture(async ({ dir, env, rogue, genuine }) => {
      await t.step("control: the process's default store trusts the rogue CA", async () => {
        const probe = `${dir}/probe.ts`;
        await Deno.writeTextFile(probe, "console.log((await fetch(Deno.args[0]!)).status);\n");
        const result = await runUntil(
          Deno.execPath(),
          ["run", "--allow-net", probe, `${rogue.url}/api/v1/nodes`],
          { env },
        );
        assert.equal(result.code, 0, result.stderr);
        assert.equal(result.stdout.trim(), "200");
        rogue.requests.length = 0;
      });

      await t.step("a certificate from another CA is refused; no request is sent", async () => {
        const kubeconfig = await writeKubeconfig(rogue, `${dir}/rogue.kubeconfig`);
        const result = await runUntil(
          Deno.execPath(),
          planArgs("--kubeconfig", kubeconfig),
          { env, until: REFUSED },
        );
        assert.match(result.stderr, REFUSED);
        assert.equal(result.stdout, "", "a plan was printed from the rogue apiserver");
        assert.deepEqual(rogue.requests, [], "a request (and its token) reached the rogue server");
      });

      await t.step("a certificate signed by the kubeconfig's CA is accepted", async () => {
        const kubeconfig = await writeKubeconfig(genuine, `${dir}/genuine.kubeconfig`);
        const result = await runUntil(
          Deno.execPath(),
          planArgs("--kubeconfig", kubeconfig),
          { env },
        );
        assert.equal(result.code, 0, result.stderr);
        assert.ok(JSON.parse(result.stdout).ipv4, "no plan printed");
        assert.ok(genuine.requests.length > 0);
      });
    });
  },
});

Deno.test({
  name: "with DENO_TLS_CA_STORE empty, kproxy's Deno TLS client trusts only the kubeconfig's CA",
  ignore: skipReason !== undefined,
  async fn(t) {
    await withFixture(async ({ dir, rogue, genuine }) => {
      // The rogue CA is the whole system store; DENO_TLS_CA_STORE="" must leave it out.
      const systemStore = { SSL_CERT_FILE: `${dir}/rogue-ca.pem`, SSL_CERT_DIR: dir };
      const empty = { ...systemStore, DENO_TLS_CA_STORE: "" };
      const probe = `${dir}/probe.ts`;
      await Deno.writeTextFile(
        probe,
        "try { console.log((await fetch(Deno.args[0]!)).status); } catch { console.log('refused'); }\n",
      );
      const fetchWith = (env: Record<string, string>) =>
        runUntil(Deno.execPath(), ["run", "--allow-net", probe, `${rogue.url}/api/v1/nodes`], {
          env,
        });

      await t.step("control: the system store holding the rogue CA vouches for it", async () => {
        const result = await fetchWith({ ...systemStore, DENO_TLS_CA_STORE: "system" });
        assert.equal(result.stdout.trim(), "200", result.stderr);
      });

      await t.step('DENO_TLS_CA_STORE="" empties the default store', async () => {
        const result = await fetchWith(empty);
        assert.equal(result.stdout.trim(), "refused", result.stderr);
        rogue.requests.length = 0;
      });

      await t.step("a certificate from another CA is refused; no request is sent", async () => {
        const kubeconfig = await writeKubeconfig(rogue, `${dir}/rogue.kubeconfig`);
        const result = await runUntil(
          Deno.execPath(),
          planArgs("--kubeconfig", kubeconfig, "--v=2"),
          { env: empty, until: REFUSED },
        );
        assert.match(result.stderr, /tls="?deno/, "the Deno TLS client was not used");
        assert.match(result.stderr, REFUSED);
        assert.equal(result.stdout, "");
        assert.deepEqual(rogue.requests, [], "a request (and its token) reached the rogue server");
      });

      await t.step("a certificate signed by the kubeconfig's CA is accepted", async () => {
        const kubeconfig = await writeKubeconfig(genuine, `${dir}/genuine.kubeconfig`);
        const result = await runUntil(Deno.execPath(), planArgs("--kubeconfig", kubeconfig), {
          env: empty,
        });
        assert.equal(result.code, 0, result.stderr);
        assert.ok(JSON.parse(result.stdout).ipv4, "no plan printed");
      });
    });
  },
});

Deno.test({
  name: "kproxy trusts only the service account's CA for the in-cluster apiserver",
  ignore: inClusterSkipReason !== undefined,
  async fn(t) {
    await withFixture(async ({ dir, cluster, env, rogue, genuine }) => {
      await Deno.writeTextFile(`${dir}/ca.crt`, cluster.cert);
      await Deno.writeTextFile(`${dir}/token`, "in-cluster-token\n");
      // A private mount namespace whose /run holds only the service account dir.
      const inCluster = (server: FakeApiServer, until?: RegExp) =>
        runUntil("unshare", [
          "--mount",
          "--propagation",
          "private",
          "sh",
          "-c",
          'set -e; mount -t tmpfs kp-trust /run; d=/run/secrets/kubernetes.io/serviceaccount; mkdir -p "$d"; cp "$0/ca.crt" "$0/token" "$d"; shift; exec "$@"',
          dir,
          "kproxy",
          Deno.execPath(),
          ...planArgs(),
        ], {
          env: {
            ...env,
            PATH: Deno.env.get("PATH") ?? "/usr/bin:/bin",
            KUBERNETES_SERVICE_HOST: "127.0.0.1",
            KUBERNETES_SERVICE_PORT: String(server.port),
          },
          until,
        });

      await t.step("a certificate from another CA is refused; no request is sent", async () => {
        const result = await inCluster(rogue, REFUSED);
        assert.match(result.stderr, REFUSED);
        assert.equal(result.stdout, "");
        assert.deepEqual(rogue.requests, []);
      });

      await t.step("a certificate signed by the service account's CA is accepted", async () => {
        const result = await inCluster(genuine);
        assert.equal(result.code, 0, result.stderr);
        assert.ok(JSON.parse(result.stdout).ipv4, "no plan printed");
        assert.equal(genuine.requests[0]?.authorization, "Bearer in-cluster-token");
      });
    });
  },
});
