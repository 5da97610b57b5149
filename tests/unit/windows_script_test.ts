import { deepStrictEqual as assertEquals, ok, throws } from "node:assert/strict";
import { diffHns } from "../../backends/windows/applier.ts";
import { renderWindows } from "../../backends/windows/render.ts";
import {
  type HnsChanges,
  parseListReply,
  parseSyncReply,
  psQuote,
  renderSyncScript,
} from "../../backends/windows/script.ts";
import { planOf, SCENARIOS, servicePort } from "../golden/ipvs/plans.ts";

const QUOTE_CHARS = "'\u2018\u2019\u201A\u201B";

/**
 * Splits a PowerShell script into code and single-quoted literals, following
 * the language's rules: a literal opens with any of the five single-quote
 * characters and a doubled quote character inside it is an escaped quote.
 * Returns the code with every literal replaced by `'…'`, and the literals'
 * decoded values.
 */
function splitLiterals(script: string): { skeleton: string; literals: string[] } {
  let skeleton = "";
  const literals: string[] = [];
  let i = 0;
  while (i < script.length) {
    const c = script[i]!;
    if (c === "#" && !script.startsWith("#>", i)) {
      const end = script.indexOf("\n", i);
      skeleton += script.slice(i, end < 0 ? undefined : end);
      i = end < 0 ? script.length : end;
      continue;
    }
    if (c === '"') {
      throw new Error(`double-quoted (expandable) string at ${i}: scripts must not use them`);
    }
    if (!QUOTE_CHARS.includes(c)) {
      skeleton += c;
      i++;
      continue;
    }
    let value = "";
    i++;
    for (;;) {
      if (i >= script.length) throw new Error("unterminated single-quoted literal");
      const d = script[i]!;
      if (QUOTE_CHARS.includes(d)) {
        if (i + 1 < script.length && QUOTE_CHARS.includes(script[i + 1]!)) {
          value += d;
          i += 2;
          continue;
        }
        i++;
        break;
      }
      value += d;
      i++;
    }
    literals.push(value);
    skeleton += "'…'";
  }
  return { skeleton, literals };
}

/** The script body after the constant prologue (which holds a C# here-string). */
function body(script: string): string {
  const marker = "$KpNetworkName = ";
  const index = script.indexOf(marker);
  return index < 0 ? script.slice(script.lastIndexOf("\n}\n") + 3) : script.slice(index);
}

const HOSTILE = [
  "x'; Remove-Item -Recurse C:\\ ; '",
  "$(Stop-Computer -Force)",
  "`$(whoami)`",
  "a;b|c&d",
  "line1\nRemove-Item C:\\\n",
  "\u2019; Stop-Computer; \u2018",
  "''''",
  "@'\nhere\n'@",
  "#comment",
];

function changesFor(): HnsChanges {
  return diffHns(
    { loadBalancers: new Set(), endpoints: new Set() },
    renderWindows(SCENARIOS["etp-local"]!),
  );
}

Deno.test("psQuote() doubles every PowerShell single-quote character", () => {
  assertEquals(psQuote("it's"), "'it''s'");
  assertEquals(psQuote("\u2018x\u2019"), "'\u2018\u2018x\u2019\u2019'");
  assertEquals(psQuote("$(x) `n ;"), "'$(x) `n ;'");
  for (const value of HOSTILE) {
    const { skeleton, literals } = splitLiterals(psQuote(value));
    assertEquals(skeleton, "'…'");
    assertEquals(literals, [value]);
  }
});

Deno.test("renderSyncScript() keeps hostile network names inside one literal", async (t) => {
  const benign = splitLiterals(body(renderSyncScript(changesFor(), { networkName: "cbr0" })));
  for (const name of HOSTILE) {
    await t.step(JSON.stringify(name), () => {
      const hostile = splitLiterals(body(renderSyncScript(changesFor(), { networkName: name })));
      assertEquals(hostile.skeleton, benign.skeleton);
      assertEquals(hostile.literals[0], name);
      assertEquals(hostile.literals.slice(1), benign.literals.slice(1));
    });
  }
});

Deno.test("renderSyncScript() uses no expandable strings anywhere", () => {
  for (const plan of Object.values(SCENARIOS)) {
    const changes = diffHns(
      { loadBalancers: new Set(), endpoints: new Set() },
      renderWindows(plan),
    );
    const script = body(renderSyncScript(changes, { networkName: "cbr0" }));
    splitLiterals(script);
    ok(!script.includes('"'));
  }
});

Deno.test("renderWindows() and renderSyncScript() reject hostile values that are not names", async (t) => {
  const cases = {
    "cluster IP": servicePort({ clusterIPs: ["10.96.0.10'; Stop-Computer; '"] }),
    "external IP": servicePort({ externalIPs: ["$(Stop-Computer)"] }),
    "endpoint IP": servicePort({
      internal: {
        endpoints: [{ ...servicePort().internal.endpoints[0]!, ip: "10.0.0.1`n" }],
        whenEmpty: "reject",
        reason: "",
      },
    }),
    "port": servicePort({ port: 0 }),
    "protocol": servicePort({ protocol: "ICMP" as never }),
  };
  for (const [name, service] of Object.entries(cases)) {
    await t.step(name, () => {
      throws(() => renderWindows(planOf([service])), /Cannot use/);
    });
  }
  await t.step("source VIP", () => {
    const network = { type: "Overlay", remoteSubnets: [] };
    throws(
      () => renderWindows(SCENARIOS.clusterip!, { sourceVip: "1.2.3.4; x", network }),
      TypeError,
    );
    throws(() => renderWindows(SCENARIOS.clusterip!, { nodeIP: "fd00::1", network }), TypeError);
  });
  const good = changesFor();
  const tampered: [string, HnsChanges][] = [
    ["load balancer id", { ...good, deleteLoadBalancers: ["x'; Stop-Computer; '"] }],
    ["endpoint id", { ...good, deleteEndpoints: ["6b70726f-0002-0000-0000-00000000dead;"] }],
    ["MAC", {
      ...good,
      createEndpoints: [{
        id: "6b70726f-0002-0000-0000-000000000001",
        ip: "10.0.0.1",
        mac: "$(x)",
        providerAddress: "",
      }],
    }],
    ["provider address", {
      ...good,
      createEndpoints: [{
        id: "6b70726f-0002-0000-0000-000000000001",
        ip: "10.0.0.1",
        mac: "02-11-0a-00-00-01",
        providerAddress: "10.0.0.2' ; x",
      }],
    }],
    ["VIP", {
      ...good,
      createLoadBalancers: [{ ...good.createLoadBalancers[0]!, vip: "10.0.0.1'+'" }],
    }],
    ["port", {
      ...good,
      createLoadBalancers: [{ ...good.createLoadBalancers[0]!, internalPort: 1.5 }],
    }],
  ];
  for (const [name, changes] of tampered) {
    await t.step(`script ${name}`, () => {
      throws(() => renderSyncScript(changes, { networkName: "cbr0" }));
    });
  }
});

Deno.test("parseSyncReply() reads the last JSON line and tolerates single items", () => {
  const reply = parseSyncReply(
    'WARNING: x\r\n{"createdLoadBalancers":"a","createdEndpoints":[],"deleted":[],' +
      '"skipped":[],"missingLocal":[],"errors":{"id":"b","error":"boom"}}\r\n',
  );
  assertEquals(reply.createdLoadBalancers, ["a"]);
  assertEquals(reply.errors, [{ id: "b", error: "boom" }]);
  throws(() => parseSyncReply("not json"), /Cannot parse HNS reply/);
  throws(() => parseSyncReply('{"deleted":[1]}'), /Cannot parse HNS reply/);
});

Deno.test("parseListReply() lower-cases ids and rejects items without one", () => {
  assertEquals(
    parseListReply(
      '{"loadBalancers":{"ID":"6B70726F-0001-0000-0000-000000000001"},"endpoints":[]}',
    ),
    {
      loadBalancerIds: ["6b70726f-0001-0000-0000-000000000001"],
      endpointIds: [],
      endpointNames: [],
      loadBalancerEndpoints: new Map([["6b70726f-0001-0000-0000-000000000001", 0]]),
      network: undefined,
    },
  );
  throws(() => parseListReply('{"loadBalancers":[{}]}'), /has no ID/);
});

Deno.test("parseListReply() reads the network's type and remote subnet routes", () => {
  const route = (prefix: unknown, pa: unknown) => ({
    Type: "RemoteSubnetRoute",
    Settings: { DestinationPrefix: prefix, IsolationId: 4096, ProviderAddress: pa },
  });
  const network = {
    ID: "0B0B0B0B-0000-4000-8000-000000000001",
    Type: "Overlay",
    Policies: [route("10.244.2.0/24", "192.168.1.12"), route("10.244.3.0/24", 7), {
      Type: "SourceMacAddress",
    }],
  };
  const listing = parseListReply(JSON.stringify({ loadBalancers: [], endpoints: [], network }));
  assertEquals(listing.network, {
    type: "Overlay",
    remoteSubnets: [{ destinationPrefix: "10.244.2.0/24", providerAddress: "192.168.1.12" }],
  });
  throws(() => parseListReply('{"network":{"ID":"x"}}'), /network has no Type/);
});

// PowerShell's own parser checks these scripts (syntax, 5.1 compatibility, hostile names):
// tests/windows/powershell_parse_test.ts.
