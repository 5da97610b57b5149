/**
 * A real etcd and kube-apiserver (built from source) inside a bench network
 * namespace, for the section that runs kproxy beside kube-proxy. The
 * namespace gets a veth to the host namespace (host end
 * {@linkcode HOST_ADDRESS}, namespace end {@linkcode NODE_ADDRESS}, a /30 of
 * their own): the bench talks to the apiserver and to the proxies' metrics
 * over it, the proxies (in the same namespace) reach the apiserver on
 * 127.0.0.1. Nothing listens outside the namespace.
 *
 * @module
 */

import { issueCertificate, makeCertificateAuthority } from "../testbed/tls.ts";
import { serviceNamespace, serviceObject, sliceObject } from "./cluster.ts";
import type { ApiObject } from "../testbed/fake_apiserver.ts";

const ANCHOR = Deno.env.get("ANCHOR") ?? "/tmp/anchor";

/** Where the bench looks for the binaries it runs (`$ANCHOR`, default /tmp/anchor). */
export const REAL_BINARIES = {
  etcd: `${ANCHOR}/root/usr/bin/etcd`,
  apiserver: `${ANCHOR}/bin/kube-apiserver`,
  kubeProxy: `${ANCHOR}/bin/kube-proxy`,
} as const;

/** How to get the binaries when they are missing. */
export const BUILD_HINT = "build them with scripts/cluster/build.sh or " +
  "/work/shared/cluster/build-kube.sh (Kubernetes v1.36 from source: kube-apiserver and " +
  "kube-proxy in $ANCHOR/bin, etcd unpacked under $ANCHOR/root)";

/** The namespace end of the veth: the apiserver's advertised address, the proxies' metrics. */
export const NODE_ADDRESS = "192.168.241.2";
/** The host end of the veth. */
export const HOST_ADDRESS = "192.168.241.1";
const SECURE_PORT = 6443;
/** The range ClusterIPs are allocated from (65k addresses: room for the 30k size). */
export const SERVICE_CIDR = "10.96.0.0/16";

/** Why the section cannot run here (a binary missing), or undefined. */
export async function missingBinaries(
  options: { kubeProxy: boolean } = { kubeProxy: true },
): Promise<string | undefined> {
  const missing: string[] = [];
  const { kubeProxy, ...servers } = REAL_BINARIES;
  for (
    const path of options.kubeProxy
      ? [...Object.values(servers), kubeProxy]
      : Object.values(servers)
  ) {
    const info = await Deno.stat(path).catch(() => undefined);
    if (!info?.isFile) missing.push(path);
  }
  return missing.length === 0 ? undefined : `missing ${missing.join(", ")}: ${BUILD_HINT}`;
}

/** A running etcd + kube-apiserver pair. */
export interface RealApiserver {
  /** The apiserver's URL as the bench (host namespace) reaches it. */
  url: string;
  /** A kubeconfig for a proxy inside the namespace (server on 127.0.0.1). */
  kubeconfig: string;
  token: string;
  client: Deno.HttpClient;
  /** Logs of etcd and the apiserver, for a failure message. */
  dir: string;
  stop(): Promise<void>;
}

async function run(program: string, args: string[]): Promise<string> {
  const out = await new Deno.Command(program, { args, stdout: "piped", stderr: "piped" }).output();
  if (!out.success) {
    throw new Error(
      `Cannot run ${program} ${args.join(" ")}: ${new TextDecoder().decode(out.stderr).trim()}`,
    );
  }
  return new TextDecoder().decode(out.stdout);
}

/** Connects `namespace` to the host namespace with a veth of {@linkcode HOST_ADDRESS}/30. */
export async function linkToHost(namespace: string): Promise<void> {
  const host = `kpb-${namespace.slice(-6)}`;
  await run("ip", [
    "link",
    "add",
    host,
    "type",
    "veth",
    "peer",
    "name",
    "eth0",
    "netns",
    namespace,
  ]);
  await run("ip", ["addr", "add", `${HOST_ADDRESS}/30`, "dev", host]);
  await run("ip", ["link", "set", host, "up"]);
  await run("ip", ["-n", namespace, "addr", "add", `${NODE_ADDRESS}/30`, "dev", "eth0"]);
  await run("ip", ["-n", namespace, "link", "set", "eth0", "up"]);
}

/**
 * Starts `command` in `namespace` (in the directory `cwd`), its output appended to `log`;
 * the child's pid is the command's own (`sh` and `ip netns exec` exec it).
 */
export function spawnLogged(
  namespace: string,
  log: string,
  command: string[],
  cwd?: string,
): Deno.ChildProcess {
  const quoted = command.map((word) => `'${word.replaceAll("'", "'\\''")}'`).join(" ");
  return new Deno.Command("sh", {
    args: ["-c", `exec ip netns exec ${namespace} ${quoted} >>'${log}' 2>&1`],
    cwd,
    stdin: "null",
    stdout: "null",
    stderr: "null",
  }).spawn();
}

/** Stops `child`: SIGTERM, then SIGKILL once `graceMs` have passed. */
export async function stopProcess(child: Deno.ChildProcess, graceMs = 15_000): Promise<void> {
  try {
    child.kill("SIGTERM");
  } catch {
    // Already exited.
  }
  const timer = setTimeout(() => {
    try {
      child.kill("SIGKILL");
    } catch {
      // Already exited.
    }
  }, graceMs);
  await child.status;
  clearTimeout(timer);
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

async function tail(path: string): Promise<string> {
  const text = await Deno.readTextFile(path).catch(() => "");
  return text.trim().split("\n").slice(-8).join("\n");
}

/**
 * Starts etcd (127.0.0.1:2379, no fsync: the bench measures proxies) and
 * kube-apiserver (:6443, token auth, a CA made with openssl) in `namespace`,
 * which {@linkcode linkToHost} connected, and waits for `/readyz`.
 */
export async function startRealApiserver(namespace: string): Promise<RealApiserver> {
  const dir = await Deno.makeTempDir({ prefix: "kp-real-apiserver-" });
  const ca = await makeCertificateAuthority("kp-bench-ca");
  const server = await issueCertificate(ca, [NODE_ADDRESS, "127.0.0.1"]);
  await Deno.writeTextFile(`${dir}/ca.pem`, ca.cert);
  await Deno.writeTextFile(`${dir}/server.pem`, server.cert);
  await Deno.writeTextFile(`${dir}/server.key`, server.key);
  await run("openssl", [
    "ecparam",
    "-name",
    "prime256v1",
    "-genkey",
    "-noout",
    "-out",
    `${dir}/sa.key`,
  ]);
  await run("openssl", ["ec", "-in", `${dir}/sa.key`, "-pubout", "-out", `${dir}/sa.pub`]);
  const token = crypto.randomUUID().replaceAll("-", "");
  await Deno.writeTextFile(`${dir}/tokens.csv`, `${token},admin,admin,system:masters\n`);
  await Deno.writeTextFile(
    `${dir}/kubeconfig`,
    [
      "apiVersion: v1",
      "kind: Config",
      "clusters:",
      `- name: bench`,
      `  cluster: {server: "https://127.0.0.1:${SECURE_PORT}", certificate-authority: "${dir}/ca.pem"}`,
      "users:",
      `- name: admin`,
      `  user: {token: "${token}"}`,
      "contexts:",
      "- name: bench",
      "  context: {cluster: bench, user: admin}",
      "current-context: bench",
      "",
    ].join("\n"),
  );
  const etcd = spawnLogged(namespace, `${dir}/etcd.log`, [
    REAL_BINARIES.etcd,
    "--name=bench",
    `--data-dir=${dir}/etcd`,
    "--listen-client-urls=http://127.0.0.1:2379",
    "--advertise-client-urls=http://127.0.0.1:2379",
    "--listen-peer-urls=http://127.0.0.1:2380",
    "--initial-advertise-peer-urls=http://127.0.0.1:2380",
    "--initial-cluster=bench=http://127.0.0.1:2380",
    "--quota-backend-bytes=8589934592",
    "--unsafe-no-fsync",
  ]);
  const apiserver = spawnLogged(namespace, `${dir}/apiserver.log`, [
    REAL_BINARIES.apiserver,
    "--etcd-servers=http://127.0.0.1:2379",
    "--bind-address=0.0.0.0",
    `--advertise-address=${NODE_ADDRESS}`,
    `--secure-port=${SECURE_PORT}`,
    `--tls-cert-file=${dir}/server.pem`,
    `--tls-private-key-file=${dir}/server.key`,
    `--token-auth-file=${dir}/tokens.csv`,
    "--authorization-mode=RBAC",
    "--service-account-issuer=https://kubernetes.default.svc",
    `--service-account-key-file=${dir}/sa.pub`,
    `--service-account-signing-key-file=${dir}/sa.key`,
    `--service-cluster-ip-range=${SERVICE_CIDR}`,
    "--kubelet-preferred-address-types=InternalIP",
    "--max-requests-inflight=800",
    "--max-mutating-requests-inflight=400",
  ]);
  const client = Deno.createHttpClient({ caCerts: [ca.cert] });
  const api: RealApiserver = {
    url: `https://${NODE_ADDRESS}:${SECURE_PORT}`,
    kubeconfig: `${dir}/kubeconfig`,
    token,
    client,
    dir,
    stop: async () => {
      await stopProcess(apiserver);
      await stopProcess(etcd);
      client.close();
      await Deno.remove(dir, { recursive: true }).catch(() => undefined);
    },
  };
  const deadline = performance.now() + 180_000;
  while (true) {
    const ready = await fetch(`${api.url}/readyz`, {
      client,
      headers: { authorization: `Bearer ${token}` },
      signal: AbortSignal.timeout(5000),
    }).then(async (response) => {
      await response.body?.cancel();
      return response.ok;
    }).catch(() => false);
    if (ready) return api;
    const exited = await Promise.race([
      apiserver.status.then(() => "apiserver"),
      etcd.status.then(() => "etcd"),
      sleep(500).then(() => undefined),
    ]);
    if (exited !== undefined || performance.now() > deadline) {
      const logs = `etcd:\n${await tail(`${dir}/etcd.log`)}\napiserver:\n${await tail(
        `${dir}/apiserver.log`,
      )}`;
      await api.stop();
      throw new Error(
        `The real apiserver ${exited ? `(${exited} exited)` : "never got ready"}:\n${logs}`,
      );
    }
  }
}

/** One request to the apiserver; throws on an unexpected status. */
export async function apiRequest(
  api: RealApiserver,
  request: { method: string; path: string; body?: unknown; accept?: number[] },
): Promise<ApiObject | undefined> {
  for (let attempt = 0;; attempt++) {
    const response = await fetch(`${api.url}${request.path}`, {
      method: request.method,
      client: api.client,
      headers: { authorization: `Bearer ${api.token}`, "content-type": "application/json" },
      body: request.body === undefined ? undefined : JSON.stringify(request.body),
    });
    const text = await response.text();
    if (response.ok) return JSON.parse(text);
    if (request.accept?.includes(response.status)) return undefined;
    // 429: the apiserver sheds load; 500/504 "etcdserver: request timed out" under load.
    if ([429, 500, 503, 504].includes(response.status) && attempt < 10) {
      await sleep(200 * (attempt + 1));
      continue;
    }
    throw new Error(
      `Cannot ${request.method} ${request.path}: ${response.status} ${text.slice(0, 300)}`,
    );
  }
}

/**
 * Service `index` as a client creates it: the bench's realistic Service
 * without what the apiserver sets (uid, timestamps, managedFields, the
 * ClusterIP, which it allocates) and without a selector (its EndpointSlice
 * is the bench's, not a controller's).
 */
export function serviceToCreate(index: number): ApiObject {
  const service = structuredClone(serviceObject(index));
  const { uid: _uid, creationTimestamp: _created, managedFields: _fields, ...metadata } = service
    .metadata as Record<string, unknown>;
  const { clusterIP: _ip, clusterIPs: _ips, selector: _selector, ...spec } = service
    .spec as Record<string, unknown>;
  return { apiVersion: "v1", kind: "Service", metadata, spec };
}

/** The EndpointSlice of service `index` as a client writes it. */
export function sliceToWrite(index: number, perService: number): ApiObject {
  const slice = structuredClone(sliceObject(index, perService));
  const {
    uid: _uid,
    creationTimestamp: _created,
    managedFields: _fields,
    generation: _generation,
    ...metadata
  } = slice.metadata as Record<string, unknown>;
  return { apiVersion: "discovery.k8s.io/v1", kind: "EndpointSlice", ...slice, metadata };
}

/** Runs `fn` over `items` with at most `limit` at a time. */
async function pool<T>(items: Iterable<T>, limit: number, fn: (item: T) => Promise<void>) {
  const iterator = items[Symbol.iterator]();
  const worker = async () => {
    for (let next = iterator.next(); !next.done; next = iterator.next()) await fn(next.value);
  };
  await Promise.all(Array.from({ length: limit }, worker));
}

function* range(from: number, to: number): Generator<number> {
  for (let i = from; i < to; i++) yield i;
}

/** What {@linkcode loadServices} took. */
export interface LoadRow {
  /** Services in the cluster after the load. */
  services: number;
  /** Services (and as many EndpointSlices) created by this load. */
  created: number;
  concurrency: number;
  ms: number;
}

/**
 * Creates services `from` … `to - 1`, each with its EndpointSlice, through
 * the API, `concurrency` requests at a time (the namespaces and the two Nodes
 * first, when `from` is 0).
 */
export async function loadServices(
  api: RealApiserver,
  options: { from: number; to: number; endpointsPerService: number; concurrency: number },
): Promise<LoadRow> {
  const started = performance.now();
  if (options.from === 0) {
    const namespaces = new Set([...range(0, 48)].map((i) => serviceNamespace(i)));
    for (const name of namespaces) {
      await apiRequest(api, {
        method: "POST",
        path: "/api/v1/namespaces",
        body: { apiVersion: "v1", kind: "Namespace", metadata: { name } },
        accept: [409],
      });
    }
    for (
      const [name, address, cidr] of [[
        "node-a",
        NODE_ADDRESS,
        "10.244.1.0/24",
      ], ["node-b", "10.202.0.2", "10.244.2.0/24"]]
    ) {
      await apiRequest(api, {
        method: "POST",
        path: "/api/v1/nodes",
        body: {
          apiVersion: "v1",
          kind: "Node",
          metadata: { name, labels: { "kubernetes.io/hostname": name } },
          spec: { podCIDR: cidr, podCIDRs: [cidr] },
          status: { addresses: [{ type: "InternalIP", address }] },
        },
        accept: [409],
      });
    }
  }
  await pool(range(options.from, options.to), options.concurrency, async (index) => {
    await apiRequest(api, {
      method: "POST",
      path: `/api/v1/namespaces/${serviceNamespace(index)}/services`,
      body: serviceToCreate(index),
    });
    await apiRequest(api, {
      method: "POST",
      path: `/apis/discovery.k8s.io/v1/namespaces/${serviceNamespace(index)}/endpointslices`,
      body: sliceToWrite(index, options.endpointsPerService),
    });
  });
  return {
    services: options.to,
    created: options.to - options.from,
    concurrency: options.concurrency,
    ms: performance.now() - started,
  };
}

/** Writes the EndpointSlice of service `index` with endpoint 0 at `address` (a PUT). */
export async function putSlice(
  api: RealApiserver,
  options: { index: number; endpointsPerService: number; address: string },
): Promise<void> {
  const slice = sliceToWrite(options.index, options.endpointsPerService);
  const endpoints = slice.endpoints as { addresses: string[] }[];
  endpoints[0]!.addresses = [options.address];
  const metadata = slice.metadata as { namespace: string; name: string };
  const path = `/apis/discovery.k8s.io/v1/namespaces/${metadata.namespace}/endpointslices/` +
    metadata.name;
  await apiRequest(api, { method: "PUT", path, body: slice });
}
