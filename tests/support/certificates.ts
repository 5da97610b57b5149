/**
 * Test certificates made with openssl: a CA and a server certificate for
 * 127.0.0.1 signed by it, for fake apiservers served over HTTPS.
 *
 * @module
 */

/** Makes a CA and a server certificate for 127.0.0.1 signed by it, with openssl. */
export async function testCertificates(): Promise<
  { cert: string; key: string; ca: string } | undefined
> {
  const dir = await Deno.makeTempDir({ prefix: "kp-ingest-tls-" });
  const openssl = async (...args: string[]) =>
    (await new Deno.Command("openssl", { args, cwd: dir, stdout: "null", stderr: "null" }).output())
      .success;
  const ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
  try {
    const ok = await openssl(
      "req",
      "-x509",
      ...ec,
      "-days",
      "1",
      "-subj",
      "/CN=fake-ca",
      "-keyout",
      "ca.key",
      "-out",
      "ca.pem",
    ) &&
      await openssl(
        "req",
        ...ec,
        "-subj",
        "/CN=fake-apiserver",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
      ) &&
      await Deno.writeTextFile(`${dir}/ext.cnf`, "subjectAltName=IP:127.0.0.1\n").then(() =>
        true
      ) &&
      await openssl(
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
      );
    if (!ok) return undefined;
    const read = (name: string) => Deno.readTextFile(`${dir}/${name}`);
    return {
      cert: await read("server.pem"),
      key: await read("server.key"),
      ca: await read("ca.pem"),
    };
  } catch {
    return undefined;
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}
