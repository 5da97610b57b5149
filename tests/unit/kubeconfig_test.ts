import assert from "node:assert/strict";
import { join } from "node:path";
import { withLogRecords } from "../support/logs.ts";
import {
  type ApiConnectionOptions,
  loadApiConnection,
  TOKEN_FILE_TTL_MS,
} from "../../lib/shell/source/kubeconfig.ts";

const CA = "-----BEGIN CERTIFICATE-----\nca\n-----END CERTIFICATE-----\n";
const CERT = "-----BEGIN CERTIFICATE-----\nclient\n-----END CERTIFICATE-----\n";
const KEY = "-----BEGIN PRIVATE KEY-----\nkey\n-----END PRIVATE KEY-----\n";

/** A kubeconfig with one context "c" joining cluster "k" and user "u". */
function kubeconfig(cluster: Record<string, unknown>, user?: Record<string, unknown>): string {
  return JSON.stringify({
    apiVersion: "v1",
    kind: "Config",
    "current-context": "c",
    clusters: [{ name: "k", cluster }],
    contexts: [{ name: "c", context: { cluster: "k", ...(user ? { user: "u" } : {}) } }],
    users: user ? [{ name: "u", user }] : [],
  });
}

/** Runs `body` in a temporary directory holding `files`. */
async function withFiles(
  files: Record<string, string>,
  body: (dir: string) => Promise<void>,
): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "kp-kubeconfig-" });
  try {
    for (const [name, text] of Object.entries(files)) {
      await Deno.writeTextFile(join(dir, name), text);
    }
    await body(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

function load(dir: string, options: Partial<ApiConnectionOptions> = {}) {
  return loadApiConnection({
    kubeconfig: join(dir, "config"),
    master: "",
    env: () => undefined,
    ...options,
  });
}

const cases: {
  name: string;
  files: Record<string, string>;
  server: string;
  headers: Record<string, string>;
  tls?: { ca?: string; cert?: string; key?: string };
  insecure?: boolean;
}[] = [
  {
    name: "a bearer token and an inline CA",
    files: {
      config: kubeconfig(
        { server: "https://10.0.0.1:6443/", "certificate-authority-data": btoa(CA) },
        { token: "abc" },
      ),
    },
    server: "https://10.0.0.1:6443",
    headers: { Authorization: "Bearer abc" },
    tls: { ca: CA },
  },
  {
    name: "a client certificate and CA as files beside the kubeconfig",
    files: {
      config: kubeconfig(
        { server: "https://api", "certificate-authority": "ca.pem" },
        { "client-certificate": "client.pem", "client-key": "client.key" },
      ),
      "ca.pem": CA,
      "client.pem": CERT,
      "client.key": KEY,
    },
    server: "https://api",
    headers: {},
    tls: { ca: CA, cert: CERT, key: KEY },
  },
  {
    name: "inline client certificate data",
    files: {
      config: kubeconfig({ server: "https://api" }, {
        "client-certificate-data": btoa(CERT),
        "client-key-data": btoa(KEY),
      }),
    },
    server: "https://api",
    headers: {},
    tls: { cert: CERT, key: KEY },
  },
  {
    name: "a token file, trimmed",
    files: {
      config: kubeconfig({ server: "https://api" }, { tokenFile: "token" }),
      token: "from-file\n",
    },
    server: "https://api",
    headers: { Authorization: "Bearer from-file" },
  },
  {
    name: "basic auth",
    files: { config: kubeconfig({ server: "https://api" }, { username: "ü", password: "p" }) },
    server: "https://api",
    headers: { Authorization: `Basic ${btoa("\xc3\xbc:p")}` },
  },
  {
    name: "no user, insecure-skip-tls-verify",
    files: { config: kubeconfig({ server: "http://api", "insecure-skip-tls-verify": true }) },
    server: "http://api",
    headers: {},
    insecure: true,
  },
];

for (const c of cases) {
  Deno.test(`loadApiConnection() reads a kubeconfig with ${c.name}`, async () => {
    await withFiles(c.files, async (dir) => {
      const connection = load(dir);
      assert.equal(connection.server, c.server);
      assert.equal(connection.origin, "kubeconfig");
      const credentials = await connection.credentials();
      assert.deepEqual(credentials.headers, c.headers);
      assert.equal(credentials.ca, c.tls?.ca);
      assert.equal(credentials.cert, c.tls?.cert);
      assert.equal(credentials.key, c.tls?.key);
      assert.equal(credentials.insecureSkipTLSVerify, c.insecure ?? false);
    });
  });
}

const errors: { name: string; config: string; files?: Record<string, string>; error: RegExp }[] = [
  {
    name: "no current context",
    config: JSON.stringify({ clusters: [], contexts: [] }),
    error: /config: current-context is not set/,
  },
  {
    name: "a context naming a missing cluster",
    config: JSON.stringify({
      "current-context": "c",
      contexts: [{ name: "c", context: { cluster: "gone" } }],
    }),
    error: /clusters has no entry named "gone"/,
  },
  {
    name: "a missing certificate file",
    config: kubeconfig({ server: "https://api", "certificate-authority": "nope.pem" }),
    error: /cluster "k"\.certificate-authority: cannot read .*nope\.pem/,
  },
  {
    name: "invalid base64",
    config: kubeconfig({ server: "https://api", "certificate-authority-data": "%%%" }),
    error: /cluster "k"\.certificate-authority-data is not valid base64/,
  },
  {
    name: "a client certificate without its key",
    config: kubeconfig({ server: "https://api" }, { "client-certificate-data": btoa(CERT) }),
    error: /user "u": client-certificate and client-key must be given together/,
  },
  {
    name: "a missing token file",
    config: kubeconfig({ server: "https://api" }, { tokenFile: "/nonexistent/token" }),
    error: /user "u"\.tokenFile: cannot read \/nonexistent\/token/,
  },
  {
    name: "text that is not a mapping",
    config: "- just\n- a list\n",
    error: /not a kubeconfig/,
  },
  {
    name: "the shipped ConfigMap's placeholder server left in",
    config: kubeconfig({ server: "https://CONTROL_PLANE_ENDPOINT:6443" }, { token: "t" }),
    error: /cluster "k" server is still the placeholder https:\/\/CONTROL_PLANE_ENDPOINT:6443/,
  },
  {
    name: "no server anywhere",
    config: kubeconfig({}),
    error: /Cannot configure the apiserver client/,
  },
];

for (const c of errors) {
  Deno.test(`loadApiConnection() names the problem with ${c.name}`, async () => {
    await withFiles({ config: c.config, ...c.files }, (dir) => {
      assert.throws(() => load(dir), (error: Error) => {
        assert.match(error.message, c.error);
        return true;
      });
      return Promise.resolve();
    });
  });
}

Deno.test("loadApiConnection() lets master override the kubeconfig's server", async () => {
  await withFiles(
    { config: kubeconfig({ server: "https://old" }, { token: "t" }) },
    async (dir) => {
      const connection = load(dir, { master: "https://new:6443" });
      assert.equal(connection.server, "https://new:6443");
      assert.deepEqual((await connection.credentials()).headers, { Authorization: "Bearer t" });
    },
  );
});

Deno.test("loadApiConnection() asks for compressed lists unless the cluster sets disable-compression", async (t) => {
  const cases: [string, Record<string, unknown>, boolean][] = [
    ["the default, as client-go", { server: "https://a" }, true],
    ["disable-compression: true", { server: "https://a", "disable-compression": true }, false],
    ["disable-compression: false", { server: "https://a", "disable-compression": false }, true],
  ];
  for (const [name, cluster, compress] of cases) {
    await t.step(name, () =>
      withFiles({ config: kubeconfig(cluster, { token: "t" }) }, (dir) => {
        assert.equal(load(dir).compress, compress);
        return Promise.resolve();
      }));
  }
  const master = loadApiConnection({ kubeconfig: "", master: "http://a", env: () => undefined });
  assert.equal(master.compress, true);
});

Deno.test("loadApiConnection() with master alone sends no credentials", async () => {
  const connection = loadApiConnection({
    kubeconfig: "",
    master: "http://127.0.0.1:8080",
    env: () => undefined,
  });
  assert.equal(connection.origin, "master");
  assert.deepEqual(await connection.credentials(), { headers: {}, insecureSkipTLSVerify: false });
});

Deno.test("loadApiConnection() uses the service account in a cluster", async () => {
  await withFiles({ "ca.crt": CA, token: "sa-token\n" }, async (dir) => {
    const env: Record<string, string> = {
      KUBERNETES_SERVICE_HOST: "fd00::1",
      KUBERNETES_SERVICE_PORT: "443",
    };
    const connection = loadApiConnection({
      kubeconfig: "",
      master: "",
      env: (name) => env[name],
      serviceAccountDir: dir,
    });
    assert.equal(connection.origin, "in-cluster");
    assert.equal(connection.server, "https://[fd00::1]:443");
    const credentials = await connection.credentials();
    assert.deepEqual(credentials.headers, { Authorization: "Bearer sa-token" });
    assert.equal(credentials.ca, CA);
  });
});

Deno.test("loadApiConnection() re-reads a token file once it is a minute old", async () => {
  await withFiles({
    config: kubeconfig({ server: "https://api" }, { tokenFile: "token" }),
    token: "first",
  }, async (dir) => {
    let now = 1_000_000;
    const connection = load(dir, { now: () => now });
    await Deno.writeTextFile(join(dir, "token"), "rotated");
    now += TOKEN_FILE_TTL_MS - 1;
    assert.deepEqual((await connection.credentials()).headers, { Authorization: "Bearer first" });
    now += 1;
    assert.deepEqual((await connection.credentials()).headers, {
      Authorization: "Bearer rotated",
    });
    await Deno.remove(join(dir, "token"));
    now += TOKEN_FILE_TTL_MS;
    assert.deepEqual(
      (await connection.credentials()).headers,
      { Authorization: "Bearer rotated" },
      "a failed re-read keeps the last token",
    );
  });
});

Deno.test("loadApiConnection() hands an exec plugin to client-node", async () => {
  const credential = JSON.stringify({
    apiVersion: "client.authentication.k8s.io/v1",
    kind: "ExecCredential",
    status: { token: "from-exec" },
  });
  await withFiles({
    config: kubeconfig({ server: "https://api" }, {
      exec: {
        apiVersion: "client.authentication.k8s.io/v1",
        command: "sh",
        args: ["-c", `printf '%s' '${credential}'`],
        interactiveMode: "Never",
      },
    }),
  }, async (dir) => {
    const connection = load(dir);
    assert.equal(connection.server, "https://api");
    const credentials = await connection.credentials();
    assert.equal(credentials.headers.Authorization, "Bearer from-exec");
  });
});

Deno.test("loadApiConnection() warns about cluster fields it cannot honour", async () => {
  await withLogRecords(["kproxy", "source"], async (records) => {
    const config = kubeconfig({ server: "https://api", "proxy-url": "http://proxy:3128" }, {
      token: "t",
    });
    await withFiles({ config }, (dir) => {
      load(dir);
      return Promise.resolve();
    });
    assert.equal(records.length, 1);
    assert.equal(records[0]?.level, "warning");
    assert.deepEqual(
      { cluster: records[0]?.properties.cluster, field: records[0]?.properties.field },
      { cluster: "k", field: "proxy-url" },
    );
  });
});
