import assert from "node:assert/strict";
import { parseAllDocuments } from "yaml";

const DEPLOY = new URL("../../scripts/deploy/", import.meta.url);

Deno.test("the hand-back DaemonSet runs `kproxy hand-back` with kproxy's own privileges, then idles", async () => {
  const docs = parseAllDocuments(
    await Deno.readTextFile(new URL("hand-back/daemonset.yaml", DEPLOY)),
  );
  assert.equal(docs.length, 1);
  assert.deepEqual(docs[0]!.errors, []);
  const ds = docs[0]!.toJS();
  assert.equal(ds.kind, "DaemonSet");
  const pod = ds.spec.template.spec;
  assert.equal(pod.hostNetwork, true);
  const [handBack] = pod.initContainers;
  assert.deepEqual(handBack.command, ["/usr/local/bin/kproxy", "hand-back"]);
  const kproxy = parseAllDocuments(await Deno.readTextFile(new URL("daemonset.yaml", DEPLOY)))[0]!
    .toJS().spec.template.spec.containers[0];
  assert.equal(handBack.image, kproxy.image);
  assert.deepEqual(handBack.securityContext, kproxy.securityContext);
  assert.deepEqual(pod.containers[0].securityContext.capabilities.drop, ["ALL"]);
  assert.equal(pod.containers[0].securityContext.capabilities.add, undefined);
});

Deno.test("scripts/deploy/README.md documents the takeover and the rollback", async () => {
  const readme = await Deno.readTextFile(new URL("README.md", DEPLOY));
  for (const step of ["## From kube-proxy to kproxy", "## Back from kproxy to kube-proxy"]) {
    assert.ok(readme.includes(step), step);
  }
  assert.match(readme, /hand-back\/daemonset\.yaml/);
});
