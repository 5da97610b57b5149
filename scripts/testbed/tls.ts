/**
 * Test certificates made with openssl: certificate authorities and server
 * certificates for 127.0.0.1 signed by them.
 *
 * @module
 */

/** A PEM certificate and its private key. */
export interface KeyPair {
  cert: string;
  key: string;
}

const EC_KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];

async function openssl(dir: string, args: string[]): Promise<void> {
  const out = await new Deno.Command("openssl", { args, cwd: dir, stdout: "null", stderr: "piped" })
    .output();
  if (!out.success) {
    throw new Error(`openssl ${args[0]}: ${new TextDecoder().decode(out.stderr).trim()}`);
  }
}

async function inTempDir<T>(body: (dir: string) => Promise<T>): Promise<T> {
  const dir = await Deno.makeTempDir({ prefix: "kp-tls-" });
  try {
    return await body(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

async function readPair(dir: string, name: string): Promise<KeyPair> {
  return {
    cert: await Deno.readTextFile(`${dir}/${name}.pem`),
    key: await Deno.readTextFile(`${dir}/${name}.key`),
  };
}

/** A self-signed certificate authority named `name`, valid for a day. */
export function makeCertificateAuthority(name: string): Promise<KeyPair> {
  return inTempDir(async (dir) => {
    await openssl(dir, [
      "req",
      "-x509",
      ...EC_KEY,
      "-days",
      "1",
      "-subj",
      `/CN=${name}`,
      "-keyout",
      "ca.key",
      "-out",
      "ca.pem",
    ]);
    return await readPair(dir, "ca");
  });
}

/**
 * A certificate for `ip` (subjectAltName IP; several when a list), signed by
 * `ca`, valid for a day.
 */
export function issueCertificate(
  ca: KeyPair,
  ip: string | readonly string[] = "127.0.0.1",
): Promise<KeyPair> {
  const ips = typeof ip === "string" ? [ip] : ip;
  return inTempDir(async (dir) => {
    await Deno.writeTextFile(`${dir}/ca.pem`, ca.cert);
    await Deno.writeTextFile(`${dir}/ca.key`, ca.key);
    await Deno.writeTextFile(
      `${dir}/ext.cnf`,
      `subjectAltName=${ips.map((address) => `IP:${address}`).join(",")}\n`,
    );
    await openssl(dir, [
      "req",
      ...EC_KEY,
      "-subj",
      `/CN=${ips[0]}`,
      "-keyout",
      "server.key",
      "-out",
      "server.csr",
    ]);
    await openssl(dir, [
      "x509",
      "-req",
      "-in",
      "server.csr",
      "-CA",
      "ca.pem",
      "-CAkey",
      "ca.key",
      "-CAcreateserial",
      "-days",
      "1",
      "-extfile",
      "ext.cnf",
      "-out",
      "server.pem",
    ]);
    return await readPair(dir, "server");
  });
}

/** Why test certificates cannot be made here, or undefined when openssl works. */
export async function opensslUnavailableReason(): Promise<string | undefined> {
  try {
    await makeCertificateAuthority("probe");
    return undefined;
  } catch (error) {
    return `openssl cannot make a certificate: ${error instanceof Error ? error.message : error}`;
  }
}

/** A CA and a server certificate for 127.0.0.1 signed by it, or undefined without openssl. */
export async function testCertificates(): Promise<
  { cert: string; key: string; ca: string } | undefined
> {
  try {
    const ca = await makeCertificateAuthority("fake-ca");
    return { ...await issueCertificate(ca), ca: ca.cert };
  } catch {
    return undefined;
  }
}
