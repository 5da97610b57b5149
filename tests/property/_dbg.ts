import fc from "fast-check";
import { Tracker } from "../../lib/tracker.ts";
import { planNode } from "../../lib/planner.ts";
import { clusterArb, listEvents, plannerOptionsArb, THIS_NODE, sourceEventArb } from "./arbitraries.ts";
let sp = 0, eps = 0, n = 0, hostSvc = 0;
for (const [o, c] of fc.sample(fc.tuple(plannerOptionsArb, clusterArb()), 200)) {
  const t = new Tracker({ nodeName: THIS_NODE }); for (const e of listEvents(c)) t.apply(e);
  const p = planNode({ state: t.drain().state, options: o });
  for (const pl of [p.ipv4, p.ipv6]) for (const s of pl.services) { sp++; eps += s.internal.endpoints.length; }
  n++;
}
for (const evs of fc.sample(fc.array(sourceEventArb(), { maxLength: 40 }), 200)) {
  const t = new Tracker({ nodeName: THIS_NODE }); for (const e of evs) t.apply(e); hostSvc += t.drain().state.services.size;
}
console.log({ perCluster: sp / n, epsPerPort: eps / sp, svcsAfterHostileSeq: hostSvc / 200 });
