/**
 * How to reach the apiserver: its URL, the TLS settings and the credentials
 * of each request, from `--kubeconfig`, the in-cluster service account, or
 * `--master` alone.
 *
 * kproxy reads the common kubeconfig shapes itself: a bearer token or token
 * file, a client certificate, basic auth, a CA, as files or inline data. A
 * user entry with anything else (an `exec` plugin, an `auth-provider`,
 * impersonation) is handed to `@kubernetes/client-node`'s KubeConfig, which is
 * imported only then: its entry module loads every generated API model, about
 * 80 MB of resident memory that kube-proxy-style nodes do not need.
 *
 * @module
 */

import { joinHostPort } from "../../core/ip.ts";
import { dirname, isAbsolute, join } from "../file_path.ts";
import { getLogger } from "../../core/logger.ts";
import { parseYamlDocument } from "../../core/yaml.ts";
import { systemClock } from "../clock.ts";

const logger = getLogger(["kproxy", "source", "kubeconfig"]);

/** Cluster fields kproxy's HTTP client cannot honour; a kubeconfig using them gets a warning. */
const UNSUPPORTED_CLUSTER_FIELDS = ["proxy-url", "tls-server-name"];

/** What one request to the apiserver carries. */
export interface Credentials {
  /** Headers to send (Authorization, impersonation). */
  headers: Record<string, string>;
  /** PEM of the CA that signs the apiserver's certificate; system roots when absent. */
  ca?: string;
  /** PEM client certificate and key. */
  cert?: string;
  key?: string;
  /** The kubeconfig asked not to verify the apiserver's certificate. */
  insecureSkipTLSVerify: boolean;
}

/** The apiserver's address and a way to get the credentials of the next request. */
export interface ApiConnection {
  /** The apiserver URL without a trailing slash. */
  readonly server: string;
  /** Where the settings came from: "kubeconfig", "in-cluster" or "master". */
  readonly origin: "kubeconfig" | "in-cluster" | "master";
  /** The credentials for the next request; a token file is re-read at most once a minute. */
  credentials(): Promise<Credentials>;
  /**
   * Lists ask for gzip bodies, as client-go's do; false when the kubeconfig's cluster sets
   * `disable-compression: true` (for apiservers on fast local networks).
   */
  readonly compress: boolean;
}

/** Options for {@linkcode loadApiConnection}. */
export interface ApiConnectionOptions {
  /** Path of a kubeconfig file; "" for the in-cluster service account (or `master` alone). */
  kubeconfig: string;
  /** The apiserver URL; overrides the kubeconfig's or in-cluster server when not "". */
  master: string;
  /** The environment, for KUBERNETES_SERVICE_HOST/PORT. @default {Deno.env.get} */
  env?: (name: string) => string | undefined;
  /** The in-cluster service account directory. */
  serviceAccountDir?: string;
  /** Monotonic milliseconds, for token file caching. @default {systemClock.now} */
  now?: () => number;
}

/** The in-cluster service account directory. */
export const SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount";

/** How long a token read from a file is used before reading the file again (as client-go). */
export const TOKEN_FILE_TTL_MS = 60_000;

/** User fields kproxy reads itself; any other field sends the user to client-node. */
const OWN_USER_FIELDS = new Set([
  "token",
  "tokenFile",
  "client-certificate",
  "client-certificate-data",
  "client-key",
  "client-key-data",
  "username",
  "password",
  "extensions",
]);

type Json = Record<string, unknown>;

function isRecord(value: unknown): value is Json {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/**
 * Resolves where the apiserver is and how to authenticate to it, as
 * kube-proxy's `--kubeconfig` and `--master` do: the kubeconfig's current
 * context, else the in-cluster service account when KUBERNETES_SERVICE_HOST
 * is set; `master` overrides the server. Files the kubeconfig names are read
 * now, so a missing certificate fails at start.
 *
 * @throws {Error} naming the file and field when the kubeconfig is unreadable
 * or inconsistent, or when no apiserver is configured at all.
 */
export function loadApiConnection(options: ApiConnectionOptions): ApiConnection {
  const env = options.env ?? readEnv;
  const now = options.now ?? systemClock.now;
  let server: string;
  let origin: ApiConnection["origin"];
  let credentials: () => Promise<Credentials>;
  let compress = true;
  if (options.kubeconfig !== "") {
    const kubeconfig = readKubeconfig(options.kubeconfig, now);
    server = kubeconfig.server;
    compress = kubeconfig.compress;
    origin = "kubeconfig";
    credentials = kubeconfig.credentials;
  } else if ((env("KUBERNETES_SERVICE_HOST") ?? "") !== "") {
    const inCluster = inClusterConnection(
      env,
      options.serviceAccountDir ?? SERVICE_ACCOUNT_DIR,
      now,
    );
    server = inCluster.server;
    origin = "in-cluster";
    credentials = inCluster.credentials;
  } else {
    server = "";
    origin = "master";
    credentials = () => Promise.resolve({ headers: {}, insecureSkipTLSVerify: false });
  }
  if (options.master !== "") server = options.master;
  if (server === "") {
    throw new Error(
      "Cannot configure the apiserver client: no --kubeconfig, --master or in-cluster environment",
    );
  }
  return { server: server.replace(/\/+$/, ""), origin, credentials, compress };
}

function readEnv(name: string): string | undefined {
  try {
    return Deno.env.get(name);
  } catch {
    return undefined;
  }
}

/** The service account's CA and a token re-read as the kubelet rotates it. */
function inClusterConnection(
  env: (name: string) => string | undefined,
  dir: string,
  now: () => number,
): { server: string; credentials: () => Promise<Credentials> } {
  const host = env("KUBERNETES_SERVICE_HOST") ?? "";
  const port = env("KUBERNETES_SERVICE_PORT") ?? "443";
  const server = `https://${joinHostPort(host, port)}`;
  const ca = readText(join(dir, "ca.crt"), "in-cluster CA");
  const token = tokenFileReader(join(dir, "token"), "in-cluster token", now);
  return {
    server,
    credentials: () =>
      Promise.resolve({
        headers: { Authorization: `Bearer ${token()}` },
        ca,
        insecureSkipTLSVerify: false,
      }),
  };
}

/** The host the shipped ConfigMap's kubeconfig names until the operator writes the endpoint. */
export const PLACEHOLDER_SERVER_HOST = "CONTROL_PLANE_ENDPOINT";

/**
 * The current context's `server`, "" when it names none.
 *
 * @throws {Error} when it still names {@linkcode PLACEHOLDER_SERVER_HOST}
 */
export function kubeconfigServer(context: KubeconfigContext): string {
  const server = typeof context.cluster.server === "string" ? context.cluster.server : "";
  if (server.toUpperCase().includes(`//${PLACEHOLDER_SERVER_HOST}`)) {
    throw new Error(
      `kubeconfig ${context.path}: cluster "${context.clusterName}" server is still the ` +
        `placeholder ${server}: write the control plane's endpoint (scripts/deploy/README.md)`,
    );
  }
  return server;
}

/** The cluster and user of a kubeconfig's current context. */
export interface KubeconfigContext {
  /** Where the kubeconfig was read from: messages name it, relative paths start at it. */
  path: string;
  clusterName: string;
  cluster: Record<string, unknown>;
  /** "" when the context names no user. */
  userName: string;
  user: Record<string, unknown>;
}

/**
 * Finds the cluster and user of a kubeconfig's current context, as
 * client-go does: no fallback to another context.
 *
 * @throws {Error} naming the file and what is missing.
 */
export function parseKubeconfig(text: string, path: string): KubeconfigContext {
  const where = `kubeconfig ${path}`;
  let document: unknown;
  try {
    document = parseYamlDocument(text);
  } catch (error) {
    throw new Error(`${where}: ${error instanceof Error ? error.message : error}`);
  }
  if (!isRecord(document)) throw new Error(`${where}: not a kubeconfig (expected a mapping)`);
  const contextName = document["current-context"];
  if (typeof contextName !== "string" || contextName === "") {
    throw new Error(`${where}: current-context is not set`);
  }
  const context = namedEntry(document, "contexts", "context", contextName, where);
  const clusterName = context.cluster;
  if (typeof clusterName !== "string" || clusterName === "") {
    throw new Error(`${where}: context "${contextName}" names no cluster`);
  }
  const cluster = namedEntry(document, "clusters", "cluster", clusterName, where);
  const userName = typeof context.user === "string" ? context.user : "";
  const user = userName === "" ? {} : namedEntry(document, "users", "user", userName, where);
  return { path, clusterName, cluster, userName, user };
}

/** The files a context names (CA, client certificate and key, token file), as absolute paths. */
export function kubeconfigFiles(context: KubeconfigContext): string[] {
  const base = dirname(context.path);
  const named = [
    context.cluster["certificate-authority"],
    context.user["client-certificate"],
    context.user["client-key"],
    context.user.tokenFile,
  ];
  return named.filter((file): file is string => typeof file === "string" && file !== "")
    .map((file) => resolvePath(base, file));
}

function resolvePath(base: string, file: string): string {
  return isAbsolute(file) ? file : join(base, file);
}

/** Reads a kubeconfig's current context into a server and its credentials. */
function readKubeconfig(
  path: string,
  now: () => number,
): { server: string; compress: boolean; credentials: () => Promise<Credentials> } {
  let text: string;
  try {
    text = Deno.readTextFileSync(path);
  } catch (error) {
    throw new Error(`kubeconfig ${path}: ${error instanceof Error ? error.message : error}`);
  }
  const context = parseKubeconfig(text, path);
  const { clusterName, cluster, userName, user } = context;
  const where = `kubeconfig ${path}`;
  const base = dirname(path);
  const server = kubeconfigServer(context);
  const ca = pemOf(cluster, "certificate-authority", base, `${where}: cluster "${clusterName}"`);
  const insecureSkipTLSVerify = cluster["insecure-skip-tls-verify"] === true;
  const compress = cluster["disable-compression"] !== true;
  for (const field of UNSUPPORTED_CLUSTER_FIELDS) {
    if (cluster[field] === undefined) continue;
    logger.warn("{where}: cluster {cluster} sets {field}, which kproxy ignores", {
      where,
      cluster: clusterName,
      field,
    });
  }

  if (Object.keys(user).some((key) => !OWN_USER_FIELDS.has(key))) {
    return { server, compress, credentials: clientNodeCredentials(path) };
  }
  const userWhere = `${where}: user "${userName}"`;
  const cert = pemOf(user, "client-certificate", base, userWhere);
  const key = pemOf(user, "client-key", base, userWhere);
  if ((cert === undefined) !== (key === undefined)) {
    throw new Error(`${userWhere}: client-certificate and client-key must be given together`);
  }
  const authorization = authorizationOf(user, base, userWhere, now);
  return {
    server,
    compress,
    credentials: () => {
      const value = authorization();
      const headers: Record<string, string> = value === undefined ? {} : { Authorization: value };
      return Promise.resolve({ headers, ca, cert, key, insecureSkipTLSVerify });
    },
  };
}

/** The `name`d entry of a kubeconfig list (`clusters`, `contexts`, `users`). */
function namedEntry(
  document: Json,
  list: string,
  field: string,
  name: string,
  where: string,
): Json {
  const entries = Array.isArray(document[list]) ? document[list] as unknown[] : [];
  const entry = entries.find((e) => isRecord(e) && e.name === name) as Json | undefined;
  if (entry === undefined) throw new Error(`${where}: ${list} has no entry named "${name}"`);
  return isRecord(entry[field]) ? entry[field] as Json : {};
}

/**
 * A PEM given as `<name>` (a path, relative to the kubeconfig) or
 * `<name>-data` (base64); the data wins, as in client-go.
 */
function pemOf(entry: Json, name: string, base: string, where: string): string | undefined {
  const data = entry[`${name}-data`];
  if (typeof data === "string" && data !== "") {
    try {
      return new TextDecoder().decode(Uint8Array.from(atob(data), (c) => c.charCodeAt(0)));
    } catch {
      throw new Error(`${where}.${name}-data is not valid base64`);
    }
  }
  const file = entry[name];
  if (typeof file !== "string" || file === "") return undefined;
  return readText(resolvePath(base, file), `${where}.${name}`);
}

/** The user's Authorization header value: a token file, a token, or basic auth. */
function authorizationOf(
  user: Json,
  base: string,
  where: string,
  now: () => number,
): () => string | undefined {
  if (typeof user.tokenFile === "string" && user.tokenFile !== "") {
    const file = resolvePath(base, user.tokenFile);
    const token = tokenFileReader(file, `${where}.tokenFile`, now);
    return () => `Bearer ${token()}`;
  }
  if (typeof user.token === "string" && user.token !== "") {
    const value = `Bearer ${user.token}`;
    return () => value;
  }
  if (typeof user.username === "string" && user.username !== "") {
    const pair = `${user.username}:${typeof user.password === "string" ? user.password : ""}`;
    const value = `Basic ${btoa(String.fromCharCode(...new TextEncoder().encode(pair)))}`;
    return () => value;
  }
  return () => undefined;
}

/**
 * A token read from `file` now (so a missing file fails at start) and again
 * once it is older than {@linkcode TOKEN_FILE_TTL_MS}. A failed re-read keeps
 * the last token.
 */
function tokenFileReader(file: string, what: string, now: () => number): () => string {
  let token = readText(file, what).trim();
  let readAt = now();
  return () => {
    if (now() - readAt < TOKEN_FILE_TTL_MS) return token;
    readAt = now();
    try {
      token = Deno.readTextFileSync(file).trim();
    } catch {
      // Keep the last token; the apiserver answers 401 if it has expired.
    }
    return token;
  };
}

function readText(file: string, what: string): string {
  try {
    return Deno.readTextFileSync(file);
  } catch (error) {
    throw new Error(
      `${what}: cannot read ${file}: ${error instanceof Error ? error.message : error}`,
    );
  }
}

/** Credentials computed by client-node's KubeConfig, imported on first use. */
function clientNodeCredentials(path: string): () => Promise<Credentials> {
  let loaded: Promise<{ applyToHTTPSOptions(options: Json): Promise<void> }> | undefined;
  return async () => {
    loaded ??= import("@kubernetes/client-node").then(({ KubeConfig }) => {
      const kubeConfig = new KubeConfig();
      kubeConfig.loadFromFile(path);
      return kubeConfig;
    });
    const options: Json = { headers: {} };
    await (await loaded).applyToHTTPSOptions(options);
    const text = (value: unknown) =>
      value === undefined || value === null ? undefined : String(value);
    const headers: Record<string, string> = {};
    for (const [name, value] of Object.entries(isRecord(options.headers) ? options.headers : {})) {
      headers[name] = String(value);
    }
    return {
      headers,
      ca: text(options.ca),
      cert: text(options.cert),
      key: text(options.key),
      insecureSkipTLSVerify: options.rejectUnauthorized === false,
    };
  };
}
