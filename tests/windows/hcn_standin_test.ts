/**
 * The HCN stand-in through kproxy's own C# shim in PowerShell 7: every
 * settings document is checked against the HCN v2 schema, and unknown fields,
 * wrong types, null, out-of-range values and references to missing objects are
 * refused with an HRESULT and an HNS error record, so a schema mistake in
 * kproxy cannot pass the suite.
 *
 * @module
 */

import { deepStrictEqual as assertEquals, ok } from "node:assert/strict";
import { PROLOGUE } from "../../backends/windows/script.ts";
import { HcnState, type HcnStateDocument, pwshTools, runPwsh } from "./hcn.ts";

const tools = await pwshTools();

const NETWORK = "11111111-2222-3333-4444-555555555555";
const POD = "aaaaaaaa-0000-0000-0000-000000000001";
const LB = "6b70726f-0001-0000-0000-000000000001";
/** A load balancer HNS creates under an id of its own (an "ignoreId" fault). */
const RENAMED = "6b70726f-0001-0000-0000-0000000000aa";

function seed(): HcnStateDocument {
  return {
    networks: [{ ID: NETWORK, Name: "cbr0", Type: "L2Bridge" }],
    endpoints: [{
      ID: POD.toUpperCase(),
      Name: "pod",
      HostComputeNetwork: NETWORK,
      IpConfigurations: [{ IpAddress: "10.244.1.5", PrefixLength: 24 }],
      Flags: 0,
    }],
    loadBalancers: [],
    faults: [{ function: "HcnCreateLoadBalancer", id: RENAMED, action: "ignoreId" }],
  };
}

/** A valid load balancer document, changed by `edit`. */
function lbSettings(edit: (settings: Record<string, any>) => void = () => {}): string {
  const settings: Record<string, any> = {
    SchemaVersion: { Major: 2, Minor: 0 },
    HostComputeEndpoints: [POD],
    FrontendVIPs: ["10.96.0.10"],
    PortMappings: [{
      Protocol: 6,
      InternalPort: 8080,
      ExternalPort: 80,
      DistributionType: 0,
      Flags: 0,
    }],
    Flags: 0,
  };
  edit(settings);
  return JSON.stringify(settings);
}

function endpointSettings(edit: (settings: Record<string, any>) => void = () => {}): string {
  const settings: Record<string, any> = {
    SchemaVersion: { Major: 2, Minor: 0 },
    Name: "kproxy-remote-10.244.2.7",
    IpConfigurations: [{ IpAddress: "10.244.2.7" }],
    MacAddress: "02-11-0a-f4-02-07",
    Flags: 1,
    Policies: [],
  };
  edit(settings);
  return JSON.stringify(settings);
}

const q = (text: string) => `'${text.replaceAll("'", "''")}'`;

/** Each case is one shim call; the script reports `ok` or the exception message. */
const CASES: Record<string, string> = {
  "unknown field": `[KProxy.Hcn]::CreateLoadBalancer(${q(LB)}, ${
    q(lbSettings((s) => (s.PortMappings[0].Weight = 1)))
  })`,
  "unknown top-level field": `[KProxy.Hcn]::CreateLoadBalancer(${q(LB)}, ${
    q(lbSettings((s) => (s.HostComputeEndpoint = [POD])))
  })`,
  "port as a string": `[KProxy.Hcn]::CreateLoadBalancer(${q(LB)}, ${
    q(lbSettings((s) => (s.PortMappings[0].InternalPort = "8080")))
  })`,
  "port out of range": `[KProxy.Hcn]::CreateLoadBalancer(${q(LB)}, ${
    q(lbSettings((s) => (s.PortMappings[0].ExternalPort = 70000)))
  })`,
  "null source VIP": `[KProxy.Hcn]::CreateLoadBalancer(${q(LB)}, ${
    q(lbSettings((s) => (s.SourceVIP = null)))
  })`,
  "unknown load balancer flag": `[KProxy.Hcn]::CreateLoadBalancer(${q(LB)}, ${
    q(lbSettings((s) => (s.Flags = 4)))
  })`,
  "VIPs as a string": `[KProxy.Hcn]::CreateLoadBalancer(${q(LB)}, ${
    q(lbSettings((s) => (s.FrontendVIPs = "10.96.0.10")))
  })`,
  "bad VIP": `[KProxy.Hcn]::CreateLoadBalancer(${q(LB)}, ${
    q(lbSettings((s) => (s.FrontendVIPs = ["10.96.0.300"])))
  })`,
  "IPv6 VIP without the IPv6 flag": `[KProxy.Hcn]::CreateLoadBalancer(${q(LB)}, ${
    q(lbSettings((s) => (s.FrontendVIPs = ["fd00:96::10"])))
  })`,
  "zero internal port": `[KProxy.Hcn]::CreateLoadBalancer(${q(LB)}, ${
    q(lbSettings((s) => (s.PortMappings[0].InternalPort = 0)))
  })`,
  "no schema version": `[KProxy.Hcn]::CreateLoadBalancer(${q(LB)}, ${
    q(lbSettings((s) => delete s.SchemaVersion))
  })`,
  "missing endpoint": `[KProxy.Hcn]::CreateLoadBalancer(${q(LB)}, ${
    q(lbSettings((s) => (s.HostComputeEndpoints = ["6b70726f-0002-0000-0000-00000000dead"])))
  })`,
  "not JSON": `[KProxy.Hcn]::CreateLoadBalancer(${q(LB)}, '{"SchemaVersion":')`,
  "missing network": `[KProxy.Hcn]::CreateEndpoint('99999999-0000-0000-0000-000000000000', ${
    q("6b70726f-0002-0000-0000-000000000002")
  }, ${q(endpointSettings())})`,
  "unknown policy type": `[KProxy.Hcn]::CreateEndpoint(${q(NETWORK)}, ${
    q("6b70726f-0002-0000-0000-000000000002")
  }, ${q(endpointSettings((s) => (s.Policies = [{ Type: "Magic", Settings: {} }])))})`,
  "unknown provider address field": `[KProxy.Hcn]::CreateEndpoint(${q(NETWORK)}, ${
    q("6b70726f-0002-0000-0000-000000000002")
  }, ${
    q(endpointSettings((s) =>
      s.Policies = [{ Type: "ProviderAddress", Settings: { PA: "192.168.0.2" } }]
    ))
  })`,
  "bad MAC": `[KProxy.Hcn]::CreateEndpoint(${q(NETWORK)}, ${
    q("6b70726f-0002-0000-0000-000000000002")
  }, ${q(endpointSettings((s) => (s.MacAddress = "02-11:0a-f4-02-07")))})`,
  "valid load balancer": `[KProxy.Hcn]::CreateLoadBalancer(${q(LB)}, ${q(lbSettings())})`,
  "same frontend twice":
    `[KProxy.Hcn]::CreateLoadBalancer('6b70726f-0001-0000-0000-000000000002', ${q(lbSettings())})`,
  "same id twice": `[KProxy.Hcn]::CreateLoadBalancer(${q(LB)}, ${
    q(lbSettings((s) => (s.FrontendVIPs = ["10.96.0.11"])))
  })`,
  "endpoint still referenced": `[KProxy.Hcn]::DeleteEndpoint(${q(POD)})`,
  "id not kept": `[KProxy.Hcn]::CreateLoadBalancer(${q(RENAMED)}, ${
    q(lbSettings((s) => (s.FrontendVIPs = ["10.96.0.12"])))
  })`,
  "missing load balancer":
    `[KProxy.Hcn]::DeleteLoadBalancer('6b70726f-0001-0000-0000-00000000dead')`,
  "valid remote endpoint with a non-ASCII name": `[KProxy.Hcn]::CreateEndpoint(${q(NETWORK)}, ${
    q("6b70726f-0002-0000-0000-000000000002")
  }, ${q(endpointSettings((s) => (s.Name = "kproxy-r\u00e9mote-\u{1F600}")))})`,
};

function script(): string {
  const calls = Object.entries(CASES).map(([name, call]) =>
    `try { ${call}; $KpOut[${q(name)}] = 'ok' } catch { $KpOut[${q(name)}] = $_.Exception.Message }`
  );
  return `${PROLOGUE}
$KpOut = [ordered]@{}
${calls.join("\n")}
$KpOut['networks by name'] = [KProxy.Hcn]::EnumerateNetworks('{"SchemaVersion":{"Major":2,"Minor":0},"Flags":0,"Filter":"{\\"Name\\":\\"cbr0\\"}"}')
$KpOut['networks by other name'] = [KProxy.Hcn]::EnumerateNetworks('{"SchemaVersion":{"Major":2,"Minor":0},"Filter":"{\\"Name\\":\\"other\\"}"}')
try { [KProxy.Hcn]::EnumerateNetworks('{"SchemaVersion":{"Major":2,"Minor":0},"Filters":""}') } catch { $KpOut['query with an unknown field'] = $_.Exception.Message }
$KpOut['load balancer'] = [KProxy.Hcn]::QueryLoadBalancer(${q(LB)}, $KpQuery)
$KpOut['remote endpoint'] = [KProxy.Hcn]::QueryEndpoint('6B70726F-0002-0000-0000-000000000002', $KpQuery)
ConvertTo-Json -Compress -InputObject $KpOut
`;
}

const HR = {
  invalidJson: "0x803B001B",
  invalidIp: "0x803B001E",
  endpointNotFound: "0x803B0002",
  networkNotFound: "0x803B0001",
  invalidPolicyType: "0x803B000E",
  portExists: "0x803B0013",
  alreadyExists: "0x800700B7",
  hasReferences: "0x803B002C",
  notFound: "0x80070490",
  invalidInternalPort: "0x803B002D",
  invalidJsonReference: "0x803B001C",
};

Deno.test({
  name: "HCN stand-in (pwsh): refuses what HNS refuses and keeps what it accepts",
  ignore: typeof tools === "string",
  async fn() {
    if (typeof tools === "string") return;
    const state = await HcnState.create(seed());
    try {
      const result = await runPwsh(tools, script(), { state });
      assertEquals(result.code, 0, result.stderr);
      const out = JSON.parse(result.stdout.trim().split("\n").at(-1)!);
      const refused: Record<string, [string, RegExp]> = {
        "unknown field": [HR.invalidJson, /PortMappings\[0\]\.Weight: unknown field/],
        "unknown top-level field": [HR.invalidJson, /HostComputeEndpoint: unknown field/],
        "port as a string": [HR.invalidJson, /InternalPort: expected an unsigned integer/],
        "port out of range": [HR.invalidJson, /70000 is out of range 0\.\.65535/],
        "null source VIP": [HR.invalidJson, /SourceVIP: expected an IP address/],
        "unknown load balancer flag": [HR.invalidJson, /Flags: 4 sets flags outside 0x3/],
        "VIPs as a string": [HR.invalidJson, /FrontendVIPs: expected an array/],
        "bad VIP": [HR.invalidIp, /FrontendVIPs\[0\]/],
        "IPv6 VIP without the IPv6 flag": [HR.invalidIp, /does not match the IPv6 flag/],
        "zero internal port": [HR.invalidInternalPort, /internal port/],
        "no schema version": [HR.invalidJson, /SchemaVersion must be 2/],
        "missing endpoint": [HR.endpointNotFound, /6b70726f-0002-0000-0000-00000000dead/],
        "not JSON": [HR.invalidJson, /unexpected end/],
        "missing network": [HR.networkNotFound, /network was not found/],
        "unknown policy type": [HR.invalidPolicyType, /unknown policy Type/],
        "unknown provider address field": [HR.invalidJson, /Settings\.PA: unknown field/],
        "bad MAC": [HR.invalidJson, /MacAddress/],
        "same frontend twice": [HR.portExists, /port already exists/],
        "same id twice": [HR.alreadyExists, /already exists/],
        "endpoint still referenced": [HR.hasReferences, /still has references/],
        "missing load balancer": [HR.notFound, /Element not found/],
        "query with an unknown field": [HR.invalidJson, /Filters: unknown field/],
      };
      for (const [name, [hresult, detail]] of Object.entries(refused)) {
        const message = String(out[name]);
        ok(message.includes(`(${hresult}): {"Success":false,"Error":"`), `${name}: ${message}`);
        ok(detail.test(message), `${name}: ${message}`);
        const record = JSON.parse(
          message.slice(message.indexOf("{"), message.lastIndexOf("}") + 1),
        );
        assertEquals(record.ErrorCode, parseInt(hresult, 16), name);
      }
      ok(
        /HNS did not keep the id 6b70726f-0001-0000-0000-0000000000aa kproxy asked for/.test(
          out["id not kept"],
        ),
        out["id not kept"],
      );
      assertEquals(out["valid load balancer"], "ok");
      assertEquals(out["valid remote endpoint with a non-ASCII name"], "ok");
      assertEquals(JSON.parse(out["networks by name"]), [NETWORK.toUpperCase()]);
      assertEquals(JSON.parse(out["networks by other name"]), []);
      const lb = JSON.parse(out["load balancer"]);
      assertEquals(lb.ID, LB.toUpperCase());
      assertEquals(lb.FrontendVIPs, ["10.96.0.10"]);
      const remote = JSON.parse(out["remote endpoint"]);
      assertEquals(remote.Name, "kproxy-r\u00e9mote-\u{1F600}");
      assertEquals(remote.HostComputeNetwork, NETWORK.toUpperCase());

      const after = await state.read();
      assertEquals(
        after.loadBalancers.map((b) => b.FrontendVIPs?.[0]),
        ["10.96.0.10", "10.96.0.12"],
        "the valid one, and the one HNS renamed",
      );
      ok(!after.loadBalancers.some((b) => b.ID === RENAMED.toUpperCase()));
      assertEquals(after.endpoints.length, 2, "only the valid remote endpoint was added");
      assertEquals(after.openHandles ?? 0, 0, "the shim closed every handle it opened");
    } finally {
      await state.remove();
    }
  },
});

/** The zero GUID: hcsshim's `createEndpoint` and `createLoadBalancer` always pass it. */
const ZERO = "00000000-0000-0000-0000-000000000000";
const OVERLAY = "22222222-3333-4444-5555-666666666666";

/**
 * Documents as hcsshim's `json.Marshal` writes them, derived from the struct tags of its `hcn`
 * package: a member tagged `omitempty` is left out when "", 0 or an empty slice, and a struct
 * member is always written (`omitempty` never drops a struct), so every HostComputeEndpoint
 * carries `"Dns":{}`, `"Health":{"Extra":{}}` and its SchemaVersion.
 */
const HCSSHIM = {
  /** What kube-proxy's `hns.createEndpoint` sends for a remote endpoint on Overlay. */
  remoteEndpoint: {
    HostComputeNetwork: OVERLAY,
    Policies: [{ Type: "ProviderAddress", Settings: { ProviderAddress: "192.168.1.12" } }],
    IpConfigurations: [{ IpAddress: "10.244.2.9" }],
    Dns: {},
    MacAddress: "02-11-0a-f4-02-09",
    Flags: 1,
    Health: { Extra: {} },
    SchemaVersion: { Major: 2, Minor: 0 },
  },
  /** kube-proxy's `newSourceVIP`: a local endpoint with the host's MAC as Go's
   * `net.HardwareAddr.String()` writes it. */
  sourceVipEndpoint: {
    HostComputeNetwork: OVERLAY,
    IpConfigurations: [{ IpAddress: "10.244.1.2" }],
    Dns: {},
    MacAddress: "00:15:5d:52:c0:01",
    Health: { Extra: {} },
    SchemaVersion: { Major: 2, Minor: 0 },
  },
  /** Every member of HostComputeEndpoint, Dns, Health and ExtraParams set. */
  fullEndpoint: {
    Name: "full",
    HostComputeNetwork: OVERLAY,
    HostComputeNamespace: "33333333-4444-5555-6666-777777777777",
    Policies: [{ Type: "OutBoundNAT", Settings: { Exceptions: ["10.0.0.0/8"] } }],
    IpConfigurations: [{ IpAddress: "10.244.1.9", PrefixLength: 24 }],
    Dns: {
      Domain: "svc.cluster.local",
      Search: ["svc.cluster.local"],
      ServerList: ["10.96.0.10"],
      Options: ["ndots:5"],
    },
    Routes: [{ NextHop: "10.244.1.1", DestinationPrefix: "0.0.0.0/0", Metric: 1 }],
    MacAddress: "00-15-5d-52-c0-09",
    Flags: 2,
    Health: {
      Data: { any: ["thing"] },
      Extra: {
        Resources: { Cpu: 1 },
        SharedContainers: ["a"],
        LayeredOn: "x",
        SwitchGuid: "y",
        UtilityVM: "z",
        VirtualMachine: "w",
      },
    },
    SchemaVersion: { Major: 2, Minor: 0 },
  },
  /** What kube-proxy's `hns.getLoadBalancer` sends for an externalTrafficPolicy Local ingress
   * IP: DistributionType 0 is left out. */
  loadBalancer: {
    HostComputeEndpoints: [POD],
    SourceVIP: "10.244.1.2",
    FrontendVIPs: ["203.0.113.20"],
    PortMappings: [{ Protocol: 6, InternalPort: 8080, ExternalPort: 80, Flags: 16 }],
    SchemaVersion: { Major: 2, Minor: 0 },
    Flags: 1,
  },
  /** hcsshim's HostComputeQuery with Flags 0 (left out). */
  query: { SchemaVersion: { Major: 2, Minor: 0 }, Filter: '{"Name":"vxlan0"}' },
  /** A network as HNS answers and hcsshim reads it. */
  network: {
    ID: OVERLAY.toUpperCase(),
    Name: "vxlan0",
    Type: "Overlay",
    Policies: [{
      Type: "RemoteSubnetRoute",
      Settings: {
        DestinationPrefix: "10.244.2.0/24",
        IsolationId: 4096,
        ProviderAddress: "192.168.1.12",
        DistributedRouterMacAddress: "00-15-5d-00-00-02",
      },
    }, { Type: "ProviderAddress", Settings: { ProviderAddress: "192.168.1.11" } }],
    MacPool: {
      Ranges: [{ StartMacAddress: "00-15-5D-52-C0-00", EndMacAddress: "00-15-5D-52-CF-FF" }],
    },
    Dns: {},
    Ipams: [{
      Type: "Static",
      Subnets: [{
        IpAddressPrefix: "10.244.1.0/24",
        Routes: [{ NextHop: "10.244.1.1", DestinationPrefix: "0.0.0.0/0" }],
      }],
    }],
    Flags: 8,
    Health: { Extra: {} },
    SchemaVersion: { Major: 2, Minor: 0 },
  },
};

type Doc = Record<string, any>;
const edit = (doc: Doc, change: (copy: Doc) => void): Doc => {
  const copy = structuredClone(doc);
  change(copy);
  return copy;
};
const createEndpoint = (doc: Doc) =>
  `[KProxy.Hcn]::CreateEndpoint(${q(OVERLAY)}, ${q(ZERO)}, ${q(JSON.stringify(doc))})`;
const createLoadBalancer = (doc: Doc) =>
  `[KProxy.Hcn]::CreateLoadBalancer(${q(ZERO)}, ${q(JSON.stringify(doc))})`;

/** Each call: `ok`, or the exception message. */
const HCSSHIM_CASES: Record<string, string> = {
  "remote endpoint": createEndpoint(HCSSHIM.remoteEndpoint),
  "every endpoint member": createEndpoint(HCSSHIM.fullEndpoint),
  "load balancer": createLoadBalancer(HCSSHIM.loadBalancer),
  "source VIP endpoint": createEndpoint(HCSSHIM.sourceVipEndpoint),
  "query": `[void][KProxy.Hcn]::EnumerateNetworks(${q(JSON.stringify(HCSSHIM.query))})`,
  "Dns.Suffix": createEndpoint(edit(HCSSHIM.remoteEndpoint, (d) => (d.Dns = { Suffix: "x" }))),
  "Health.Extra unknown": createEndpoint(
    edit(HCSSHIM.remoteEndpoint, (d) => (d.Health.Extra.Bogus = "x")),
  ),
  "Dns.Domain a number": createEndpoint(
    edit(HCSSHIM.remoteEndpoint, (d) => (d.Dns = { Domain: 7 })),
  ),
  "Health an array": createEndpoint(edit(HCSSHIM.remoteEndpoint, (d) => (d.Health = []))),
  "load balancer on a missing endpoint": createLoadBalancer(
    edit(HCSSHIM.loadBalancer, (d) => (d.HostComputeEndpoints = [ZERO])),
  ),
  "endpoint of another network": createEndpoint(
    edit(HCSSHIM.remoteEndpoint, (d) => (d.HostComputeNetwork = NETWORK)),
  ),
};

Deno.test({
  name: "HCN stand-in (pwsh): accepts documents shaped as hcsshim writes them, refuses an " +
    "unknown field, a wrong type and a missing reference",
  ignore: typeof tools === "string",
  async fn() {
    if (typeof tools === "string") return;
    const document = seed();
    document.networks.push(HCSSHIM.network as HcnStateDocument["networks"][number]);
    const state = await HcnState.create(document);
    try {
      const calls = Object.entries(HCSSHIM_CASES).map(([name, call]) =>
        `try { ${call}; $KpOut[${q(name)}] = 'ok' } catch { $KpOut[${
          q(name)
        }] = $_.Exception.Message }`
      );
      const result = await runPwsh(
        tools,
        `${PROLOGUE}\n$KpOut = [ordered]@{}\n${
          calls.join("\n")
        }\nConvertTo-Json -Compress -InputObject $KpOut\n`,
        { state },
      );
      assertEquals(result.code, 0, result.stderr);
      const out = JSON.parse(result.stdout.trim().split("\n").at(-1)!);
      const accepted = [
        "remote endpoint",
        "source VIP endpoint",
        "every endpoint member",
        "load balancer",
        "query",
      ];
      for (const name of accepted) {
        assertEquals(out[name], "ok", name);
      }
      const refused: Record<string, [string, RegExp]> = {
        "Dns.Suffix": [HR.invalidJson, /Dns\.Suffix: unknown field/],
        "Health.Extra unknown": [HR.invalidJson, /Health\.Extra\.Bogus: unknown field/],
        "Dns.Domain a number": [HR.invalidJson, /Dns\.Domain: expected a string/],
        "Health an array": [HR.invalidJson, /Health: expected an object/],
        "load balancer on a missing endpoint": [HR.endpointNotFound, /endpoint was not found/],
        "endpoint of another network": [HR.invalidJsonReference, /reference is invalid/],
      };
      for (const [name, [hresult, detail]] of Object.entries(refused)) {
        const message = String(out[name]);
        ok(message.includes(`(${hresult})`) && detail.test(message), `${name}: ${message}`);
      }
      const after = await state.read();
      const created = after.endpoints.filter((e) => e.HostComputeNetwork === OVERLAY);
      assertEquals(created.length, 3, "the three endpoints, under ids HCN chose");
      ok(created.every((e) => e.ID !== ZERO && /^[0-9A-F-]{36}$/i.test(e.ID)));
      assertEquals(after.loadBalancers.length, 1);
    } finally {
      await state.remove();
    }
  },
});

Deno.test({
  name: "HCN stand-in (pwsh): a seeded network with a field hcsshim does not know is refused",
  ignore: typeof tools === "string",
  async fn() {
    if (typeof tools === "string") return;
    const document = seed();
    document.networks.push(edit(HCSSHIM.network, (d) => (d.Dns = { Suffix: "x" })) as any);
    const state = await HcnState.create(document);
    try {
      const result = await runPwsh(
        tools,
        `${PROLOGUE}\ntry { [void][KProxy.Hcn]::EnumerateNetworks($KpQuery); 'ok' } catch { $_.Exception.Message }\n`,
        { state },
      );
      ok(
        /invalid network: networks\[1\]\.Dns\.Suffix: unknown field/.test(result.stdout),
        result.stdout,
      );
    } finally {
      await state.remove();
    }
  },
});
