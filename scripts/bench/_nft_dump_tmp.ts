import { benchPlan } from "./nftables.ts";
import { renderFull } from "../../backends/nftables/render.ts";
const n = Number(Deno.args[0] ?? 1000);
const t0 = performance.now();
const s = renderFull(benchPlan(n, 10)).toString();
console.error("render ms", performance.now() - t0);
await Deno.writeTextFile(`/tmp/kp_${n}.nft`, s);
