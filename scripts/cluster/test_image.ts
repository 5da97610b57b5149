/**
 * One image the e2e tests run (agnhost, busybox, the conntrack regression server, pause), from a
 * root file system directory, as an archive `ctr images import` loads: kproxy's own OCI writer
 * (`scripts/image/oci.ts`), one layer, named under the `localhost` pseudo-registry that
 * `KUBE_TEST_REPO_LIST` maps the e2e registries to, so no node pulls from a registry.
 *
 * ```sh
 * deno run --allow-read --allow-write --allow-run=tar,gzip scripts/cluster/test_image.ts \
 *   ROOTFS OUT.tar localhost/e2e-test-images/agnhost:2.59 '["/agnhost"]' '["pause"]'
 * ```
 *
 * @module
 */

import { writeImageArchive } from "../image/oci.ts";

if (import.meta.main) {
  const [root, output, reference, entrypoint, cmd] = Deno.args;
  if (!root || !output || !reference || !entrypoint) {
    console.error("usage: test_image.ts ROOTFS OUT.tar NAME:TAG ENTRYPOINT_JSON [CMD_JSON]");
    Deno.exit(2);
  }
  const colon = reference.lastIndexOf(":");
  const workDir = await Deno.makeTempDir({ prefix: "kpc-image-" });
  try {
    await writeImageArchive({
      identity: {
        repository: reference.slice(0, colon),
        tag: reference.slice(colon + 1),
        epoch: 0,
      },
      settings: {
        entrypoint: JSON.parse(entrypoint),
        cmd: cmd ? JSON.parse(cmd) : undefined,
        env: ["PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"],
        workingDir: "/",
        labels: {},
      },
      layers: [{ root, comment: `${reference} for the e2e tests` }],
      output,
      workDir,
    });
  } finally {
    await Deno.remove(workDir, { recursive: true });
  }
}
