import { deepStrictEqual as assertEquals, throws } from "node:assert/strict";
import { applyIpvsOps, diffIpvs, renderIpvsOps } from "../../backends/ipvs/diff.ts";
import { renderIpvsIptables } from "../../backends/ipvs/iptables.ts";
import { masqueradeMark } from "../../backends/iptables/rules.ts";
import { parseIpvsadmList, parseIpvsadmSave } from "../../backends/ipvs/parse.ts";
import {
  renderIpsetRestoreDiff,
  renderIpvs,
  renderIpvsadmRestore,
} from "../../backends/ipvs/render.ts";
import { endpoint, planOf, SCENARIOS, servicePort } from "../golden/ipvs/plans.ts";

Deno.test("parseIpvsadmSave() reads back what renderIpvsadmRestore() writes", async (t) => {
  for (const [name, plan] of Object.entries(SCENARIOS)) {
    await t.step(name, () => {
      for (const scheduler of ["rr", "mh"]) {
        const state = renderIpvs(plan, { scheduler });
        assertEquals(parseIpvsadmSave(renderIpvsadmRestore(state)), state.virtualServers);
      }
    });
  }
});

Deno.test("parseIpvsadmSave() ignores firewall-mark services and rejects garbage", () => {
  assertEquals(parseIpvsadmSave("-A -f 100 -s rr\n-a -f 100 -r 10.0.0.1:0 -m -w 1\n"), []);
  throws(() => parseIpvsadmSave("-A -t not-an-address -s rr\n"), TypeError);
  throws(() => parseIpvsadmSave("-a -t 10.0.0.1:80 -r 10.0.0.2:80 -m -w 1\n"), TypeError);
});

Deno.test("parseIpvsadmList() reads connection counts per real server", () => {
  const text = [
    "IP Virtual Server version 1.2.1 (size=4096)",
    "Prot LocalAddress:Port Scheduler Flags",
    "  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn",
    "TCP  10.96.0.10:80 rr persistent 10800",
    "  -> 10.244.1.5:8080              Masq    1      3          7",
    "UDP  [fd00:96::10]:53 mh (mh-port)",
    "  -> [fd00:244::5]:53             Masq    0      0          2",
    "",
  ].join("\n");
  const parsed = parseIpvsadmList(text);
  assertEquals(parsed.get("TCP/10.96.0.10/80")?.get("10.244.1.5:8080")?.activeConnections, 3);
  assertEquals(parsed.get("TCP/10.96.0.10/80")?.get("10.244.1.5:8080")?.inactiveConnections, 7);
  assertEquals(parsed.get("UDP/fd00:96::10/53")?.get("[fd00:244::5]:53")?.weight, 0);
});

Deno.test("diffIpvs() edits a virtual server whose scheduling changed, keeps its real servers", () => {
  const before = renderIpvs(SCENARIOS.clusterip!, { scheduler: "rr" }).virtualServers;
  const after = renderIpvs(SCENARIOS.affinity!, { scheduler: "rr" }).virtualServers;
  const ops = diffIpvs(before, after);
  assertEquals(renderIpvsOps(ops), "-E -t 10.96.0.10:80 -s rr -p 10800\n");
  assertEquals(applyIpvsOps(before, ops), after);
});

Deno.test("diffIpvs() and renderIpsetRestoreDiff() add before they remove, so every stop keeps a way in", () => {
  const moved = [endpoint("10.244.3.3", 8080), endpoint("10.244.4.4", 8080)];
  for (const protocol of ["TCP", "UDP"] as const) {
    const before = planOf([servicePort({ protocol })]);
    const after = planOf([
      servicePort({
        protocol,
        internal: { endpoints: moved, whenEmpty: "reject", reason: "" },
        external: { endpoints: moved, whenEmpty: "reject", reason: "" },
      }),
    ]);
    const [old, next] = [before, after].map((plan) => renderIpvs(plan, { scheduler: "rr" }));
    const ops = diffIpvs(old!.virtualServers, next!.virtualServers).map((op) => op.kind);
    const firstRemoval = ops.findIndex((kind) => kind === "delete-real" || kind === "edit-real");
    assertEquals(ops.lastIndexOf("add-real") < firstRemoval, true, `${protocol}: ${ops}`);
    const lines = renderIpsetRestoreDiff(old!, next!).split("\n");
    const firstDel = lines.findIndex((line) => line.startsWith("del "));
    const lastAdd = lines.findLastIndex((line) => line.startsWith("add "));
    assertEquals(firstDel === -1 || lastAdd < firstDel, true, lines.join("\n"));
  }
});

Deno.test("diffIpvs() of identical states is empty", () => {
  for (const plan of Object.values(SCENARIOS)) {
    const state = renderIpvs(plan).virtualServers;
    assertEquals(diffIpvs(state, state), []);
    assertEquals(applyIpvsOps([], diffIpvs([], state)), state);
  }
});

Deno.test("renderIpsetRestoreDiff() of identical states is empty", () => {
  const state = renderIpvs(SCENARIOS["etp-local"]!);
  assertEquals(renderIpsetRestoreDiff(state, state), "");
});

Deno.test("renderIpvs() rejects values that could change a command line", async (t) => {
  const cases = {
    "cluster IP with a space": servicePort({ clusterIPs: ["10.96.0.10 -s wlc"] }),
    "endpoint IP with a newline": servicePort({
      internal: {
        endpoints: [{ ...servicePort().internal.endpoints[0]!, ip: "10.0.0.1\n-C" }],
        whenEmpty: "reject",
        reason: "",
      },
    }),
    "source range not a CIDR": servicePort({
      loadBalancerIPs: ["203.0.113.10"],
      sourceRanges: ["0.0.0.0/0,1.2.3.4"],
    }),
    "IPv6 address in an IPv4 plan": servicePort({ externalIPs: ["fd00::1"] }),
    "port out of range": servicePort({ port: 70000 }),
    "affinity timeout not an integer": servicePort({ affinityTimeoutSeconds: 1.5 }),
  };
  for (const [name, service] of Object.entries(cases)) {
    await t.step(name, () => {
      throws(() => renderIpvs(planOf([service])), /Cannot use/);
    });
  }
  await t.step("unknown scheduler", () => {
    throws(() => renderIpvs(SCENARIOS.clusterip!, { scheduler: "rr -p 1" }), TypeError);
  });
});

Deno.test("renderIpvsIptables() masquerades per clusterIPMasquerade and detector", async (t) => {
  await t.step("all", () => {
    const text = renderIpvsIptables({
      ...planOf([servicePort()]),
      clusterIPMasquerade: "all",
    });
    assertEquals(text.includes("--match-set KUBE-CLUSTER-IP dst,dst -j KUBE-MARK-MASQ"), true);
  });
  await t.step("none", () => {
    const plan = { ...planOf([servicePort()]), clusterIPMasquerade: "none" as const };
    plan.localTraffic = { mode: "None" };
    assertEquals(renderIpvsIptables(plan).includes("-j KUBE-NON-LOCAL-MASQ"), false);
  });
  await t.step("interface prefix", () => {
    const plan = planOf([servicePort()]);
    plan.localTraffic = { mode: "InterfaceNamePrefix", interfaces: ["veth"] };
    assertEquals(
      renderIpvsIptables(plan).includes("-A KUBE-NON-LOCAL-MASQ -i veth+ -j RETURN"),
      true,
    );
  });
  await t.step("hostile interface name", () => {
    const plan = planOf([servicePort()]);
    plan.localTraffic = { mode: "BridgeInterface", interfaces: ["br0 -j ACCEPT"] };
    throws(() => renderIpvsIptables(plan), TypeError);
  });
  await t.step("masquerade bit", () => {
    assertEquals(masqueradeMark(14), "0x4000");
    throws(() => masqueradeMark(32), RangeError);
  });
});
