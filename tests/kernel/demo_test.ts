import assert from "node:assert/strict";
import { runDemo } from "../../scripts/demo.ts";
import { kernelSkipReason } from "./netns.ts";

const skipReason = await kernelSkipReason(["nft"]);

Deno.test({
  name: "runDemo() shows web traffic moving after its endpoint changes, then cleans up",
  ignore: skipReason !== undefined,
  sanitizeOps: false,
  sanitizeResources: false,
  async fn() {
    let stdout = "";
    let stderr = "";
    const status = await runDemo({
      io: { stdout: (text) => stdout += text, stderr: (text) => stderr += text },
    });
    assert.equal(status, 0, stderr);
    const [before, after] = stdout.split("moving web's endpoint");
    assert.match(before!, /web \(cluster IP 10\.96\.0\.10:80\):\n {4}answered by pod-[ab]1 /);
    assert.match(before!, /node port 10\.201\.0\.1:30080\):\n {4}answered by pod-[ab]2 /);
    // Only pod-a1 and pod-a2 remain behind web once the file source re-read the slice.
    assert.equal(after!.match(/answered by pod-a[12] /g)?.length, 6, stdout);
    assert.match(stdout, /namespaces and temporary files deleted/);
    const list = await new Deno.Command("ip", { args: ["netns", "list"], stdout: "piped" })
      .output();
    assert.doesNotMatch(new TextDecoder().decode(list.stdout), /^kp-d-/m);
  },
});
