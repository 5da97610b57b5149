import { renderFull, renderPartial, renderTopLevelChains } from "../../backends/iptables/render.ts";
import { endpointChainName } from "../../backends/iptables/names.ts";
import { benchPlan } from "./iptables.ts";
const plan = benchPlan(10000, 10);
const next = benchPlan(10000, 10, 5000);
for (let k = 0; k < 2; k++) {
  let t = performance.now();
  const s = renderFull(plan);
  console.log("renderFull", (performance.now() - t).toFixed(0));
  t = performance.now(); s.toString(); console.log("toString", (performance.now() - t).toFixed(0));
  t = performance.now(); renderTopLevelChains(plan); console.log("top", (performance.now() - t).toFixed(0));
  t = performance.now();
  for (const svc of plan.services) for (const ep of svc.internal.endpoints) endpointChainName(svc, ep);
  console.log("hash 100k", (performance.now() - t).toFixed(0));
  t = performance.now();
  renderPartial({ previous: plan, next, changed: new Set([next.services[5000]!.id]) });
  console.log("partial", (performance.now() - t).toFixed(0));
}
