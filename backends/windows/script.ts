/**
 * PowerShell scripts for the kernelspace mode, run by
 * `powershell.exe -NoProfile -NonInteractive -Command -`. They call the Host
 * Compute Network API (computenetwork.dll, the API hcsshim's `hcn` package and
 * upstream's `hns.go` use) through a small constant C# shim, and end by
 * printing one `ConvertTo-Json -Compress` line that the backend parses.
 *
 * Data reaches a script only as validated numbers, validated GUIDs and IPs,
 * and single-quoted literals with every quote character doubled
 * ({@linkcode psQuote}); names of Kubernetes objects never appear in it.
 *
 * @module
 */

import { parseIP } from "../../lib/core/ip.ts";
import type {
  HnsNetworkInfo,
  LoadBalancerSpec,
  RemoteEndpointSpec,
  RemoteSubnet,
} from "./render.ts";
import { validateGuid } from "./render.ts";

/** PowerShell treats these four characters as well as `'` as single quotes. */
const SINGLE_QUOTES = /['\u2018\u2019\u201A\u201B]/g;

/**
 * Quotes a value as a PowerShell single-quoted literal: nothing inside is
 * expanded (`$()`, backticks, `;` and newlines are plain text); a quote
 * character is doubled, as `CodeGeneration.EscapeSingleQuotedStringContent` does.
 */
export function psQuote(value: string): string {
  return `'${value.replace(SINGLE_QUOTES, (quote) => quote + quote)}'`;
}

function psArray(values: readonly string[]): string {
  return `@(${values.map(psQuote).join(", ")})`;
}

function psInt(value: number, max: number): string {
  if (!Number.isInteger(value) || value < 0 || value > max) {
    throw new RangeError(`Cannot use ${value} in an HNS script: not an integer in 0..${max}`);
  }
  return String(value);
}

function checkIp(ip: string): string {
  if (parseIP(ip) === undefined) {
    throw new TypeError(`Cannot use "${ip}" in an HNS script: not an IP address`);
  }
  return ip;
}

function checkGuid(id: string): string {
  validateGuid(id);
  return id;
}

const MAC = /^[0-9a-f]{2}(-[0-9a-f]{2}){5}$/;

/** The HNS changes of one sync, applied in this order: deletions first. */
export interface HnsChanges {
  deleteLoadBalancers: string[];
  deleteEndpoints: string[];
  createEndpoints: RemoteEndpointSpec[];
  createLoadBalancers: LoadBalancerSpec[];
  /**
   * Load balancers in HNS that lack some of their endpoints: each is deleted and
   * created again once all its endpoints exist, and left as it is until then.
   */
  replaceLoadBalancers?: LoadBalancerSpec[];
}

/** What a sync script reports (its last output line). */
export interface HnsSyncReply {
  createdLoadBalancers: string[];
  createdEndpoints: string[];
  deleted: string[];
  /** Load balancers not created because none of their endpoints exists on the node. */
  skipped: string[];
  /** Local endpoint IPs with no HNS endpoint on the network. */
  missingLocal: string[];
  /** Load balancers in HNS without some of their endpoints (created so, or left so). */
  incomplete: string[];
  errors: { id: string; error: string }[];
}

/** Options for {@linkcode renderSyncScript}. */
export interface SyncScriptOptions {
  /** `--network-name` / `winkernel.networkName`: the HNS network of the pods. */
  networkName: string;
}

/** The constant part of every script: strict mode and the HCN shim. */
export const PROLOGUE = `$ErrorActionPreference = 'Stop'
if (-not ('KProxy.Hcn' -as [type])) {
Add-Type -TypeDefinition @'
using System;
using System.Runtime.InteropServices;
namespace KProxy {
public static class Hcn {
  const string Dll = "computenetwork.dll";
  [DllImport(Dll, CharSet = CharSet.Unicode)] static extern int HcnEnumerateNetworks(string query, out IntPtr networks, out IntPtr error);
  [DllImport(Dll, CharSet = CharSet.Unicode)] static extern int HcnOpenNetwork(ref Guid id, out IntPtr network, out IntPtr error);
  [DllImport(Dll, CharSet = CharSet.Unicode)] static extern int HcnQueryNetworkProperties(IntPtr network, string query, out IntPtr properties, out IntPtr error);
  [DllImport(Dll)] static extern int HcnCloseNetwork(IntPtr network);
  [DllImport(Dll, CharSet = CharSet.Unicode)] static extern int HcnEnumerateEndpoints(string query, out IntPtr endpoints, out IntPtr error);
  [DllImport(Dll, CharSet = CharSet.Unicode)] static extern int HcnOpenEndpoint(ref Guid id, out IntPtr endpoint, out IntPtr error);
  [DllImport(Dll, CharSet = CharSet.Unicode)] static extern int HcnQueryEndpointProperties(IntPtr endpoint, string query, out IntPtr properties, out IntPtr error);
  [DllImport(Dll, CharSet = CharSet.Unicode)] static extern int HcnCreateEndpoint(IntPtr network, ref Guid id, string settings, out IntPtr endpoint, out IntPtr error);
  [DllImport(Dll, CharSet = CharSet.Unicode)] static extern int HcnDeleteEndpoint(ref Guid id, out IntPtr error);
  [DllImport(Dll)] static extern int HcnCloseEndpoint(IntPtr endpoint);
  [DllImport(Dll, CharSet = CharSet.Unicode)] static extern int HcnEnumerateLoadBalancers(string query, out IntPtr balancers, out IntPtr error);
  [DllImport(Dll, CharSet = CharSet.Unicode)] static extern int HcnOpenLoadBalancer(ref Guid id, out IntPtr balancer, out IntPtr error);
  [DllImport(Dll, CharSet = CharSet.Unicode)] static extern int HcnQueryLoadBalancerProperties(IntPtr balancer, string query, out IntPtr properties, out IntPtr error);
  [DllImport(Dll, CharSet = CharSet.Unicode)] static extern int HcnCreateLoadBalancer(ref Guid id, string settings, out IntPtr balancer, out IntPtr error);
  [DllImport(Dll, CharSet = CharSet.Unicode)] static extern int HcnDeleteLoadBalancer(ref Guid id, out IntPtr error);
  [DllImport(Dll)] static extern int HcnCloseLoadBalancer(IntPtr balancer);

  static string Take(IntPtr text) {
    if (text == IntPtr.Zero) return "";
    string value = Marshal.PtrToStringUni(text);
    Marshal.FreeCoTaskMem(text);
    return value;
  }
  static void Check(int hr, IntPtr error, string what) {
    string detail = Take(error);
    if (hr != 0) throw new Exception(what + " failed (0x" + hr.ToString("X8") + "): " + detail);
  }
  public static string EnumerateNetworks(string query) { IntPtr list, e; Check(HcnEnumerateNetworks(query, out list, out e), e, "HcnEnumerateNetworks"); return Take(list); }
  public static string EnumerateEndpoints(string query) { IntPtr list, e; Check(HcnEnumerateEndpoints(query, out list, out e), e, "HcnEnumerateEndpoints"); return Take(list); }
  public static string EnumerateLoadBalancers(string query) { IntPtr list, e; Check(HcnEnumerateLoadBalancers(query, out list, out e), e, "HcnEnumerateLoadBalancers"); return Take(list); }
  public static string QueryNetwork(string id, string query) {
    Guid g = new Guid(id); IntPtr h, p, e;
    Check(HcnOpenNetwork(ref g, out h, out e), e, "HcnOpenNetwork");
    try { Check(HcnQueryNetworkProperties(h, query, out p, out e), e, "HcnQueryNetworkProperties"); return Take(p); } finally { HcnCloseNetwork(h); }
  }
  public static string QueryEndpoint(string id, string query) {
    Guid g = new Guid(id); IntPtr h, p, e;
    Check(HcnOpenEndpoint(ref g, out h, out e), e, "HcnOpenEndpoint");
    try { Check(HcnQueryEndpointProperties(h, query, out p, out e), e, "HcnQueryEndpointProperties"); return Take(p); } finally { HcnCloseEndpoint(h); }
  }
  public static string QueryLoadBalancer(string id, string query) {
    Guid g = new Guid(id); IntPtr h, p, e;
    Check(HcnOpenLoadBalancer(ref g, out h, out e), e, "HcnOpenLoadBalancer");
    try { Check(HcnQueryLoadBalancerProperties(h, query, out p, out e), e, "HcnQueryLoadBalancerProperties"); return Take(p); } finally { HcnCloseLoadBalancer(h); }
  }
  const string Query = "{\\"SchemaVersion\\":{\\"Major\\":2,\\"Minor\\":0},\\"Flags\\":0}";
  static void Kept(string properties, string id, string what) {
    if (new Guid(id) == Guid.Empty) return;
    if (properties.IndexOf("\\"" + id + "\\"", StringComparison.OrdinalIgnoreCase) < 0) throw new Exception(what + ": HNS did not keep the id " + id + " kproxy asked for: " + properties);
  }
  public static void CreateEndpoint(string networkId, string id, string settings) {
    Guid n = new Guid(networkId); Guid g = new Guid(id); IntPtr net, h, e, p;
    Check(HcnOpenNetwork(ref n, out net, out e), e, "HcnOpenNetwork");
    try {
      Check(HcnCreateEndpoint(net, ref g, settings, out h, out e), e, "HcnCreateEndpoint");
      try { Check(HcnQueryEndpointProperties(h, Query, out p, out e), e, "HcnQueryEndpointProperties"); Kept(Take(p), id, "HcnCreateEndpoint"); } finally { HcnCloseEndpoint(h); }
    } finally { HcnCloseNetwork(net); }
  }
  public static void DeleteEndpoint(string id) { Guid g = new Guid(id); IntPtr e; Check(HcnDeleteEndpoint(ref g, out e), e, "HcnDeleteEndpoint"); }
  public static void CreateLoadBalancer(string id, string settings) {
    Guid g = new Guid(id); IntPtr h, e, p;
    Check(HcnCreateLoadBalancer(ref g, settings, out h, out e), e, "HcnCreateLoadBalancer");
    try { Check(HcnQueryLoadBalancerProperties(h, Query, out p, out e), e, "HcnQueryLoadBalancerProperties"); Kept(Take(p), id, "HcnCreateLoadBalancer"); } finally { HcnCloseLoadBalancer(h); }
  }
  public static void DeleteLoadBalancer(string id) { Guid g = new Guid(id); IntPtr e; Check(HcnDeleteLoadBalancer(ref g, out e), e, "HcnDeleteLoadBalancer"); }
}
}
'@
}
$KpQuery = '{"SchemaVersion":{"Major":2,"Minor":0},"Flags":0}'
$KpResult = [ordered]@{ createdLoadBalancers = @(); createdEndpoints = @(); deleted = @(); skipped = @(); missingLocal = @(); incomplete = @(); errors = @() }
function ConvertFrom-KpList([string] $Text) { if ($Text -eq '') { return }; $items = ConvertFrom-Json $Text; foreach ($item in $items) { $item } }
function Get-KpLoadBalancers { foreach ($id in (ConvertFrom-KpList ([KProxy.Hcn]::EnumerateLoadBalancers($KpQuery)))) { ConvertFrom-Json ([KProxy.Hcn]::QueryLoadBalancer([string]$id, $KpQuery)) } }
function Get-KpEndpoints { foreach ($id in (ConvertFrom-KpList ([KProxy.Hcn]::EnumerateEndpoints($KpQuery)))) { ConvertFrom-Json ([KProxy.Hcn]::QueryEndpoint([string]$id, $KpQuery)) } }
function Remove-KpLoadBalancer([string] $Id) {
  try { [KProxy.Hcn]::DeleteLoadBalancer($Id); $KpResult.deleted += $Id } catch { $KpResult.errors += [ordered]@{ id = $Id; error = $_.Exception.Message } }
}
function Remove-KpEndpoint([string] $Id) {
  try { [KProxy.Hcn]::DeleteEndpoint($Id); $KpResult.deleted += $Id } catch { $KpResult.errors += [ordered]@{ id = $Id; error = $_.Exception.Message } }
}
function Get-KpHostMac([string] $Ip) {
  foreach ($nic in [System.Net.NetworkInformation.NetworkInterface]::GetAllNetworkInterfaces()) {
    foreach ($unicast in $nic.GetIPProperties().UnicastAddresses) {
      if ($unicast.Address.ToString() -ne $Ip) { continue }
      $bytes = $nic.GetPhysicalAddress().GetAddressBytes()
      if ($bytes.Length -eq 6) { return ((@($bytes) | ForEach-Object { $_.ToString('x2') }) -join '-') }
    }
  }
  return ''
}
function New-KpRemoteEndpoint([string] $Id, [string] $Ip, [string] $Mac, [string] $ProviderAddress, [string] $HostMacOf, [switch] $Local) {
  if ($HostMacOf -ne '') {
    $Mac = Get-KpHostMac $HostMacOf
    if ($Mac -eq '') { $KpResult.errors += [ordered]@{ id = $Id; error = ('no network adapter with a MAC holds the node address ' + $HostMacOf) }; return }
  }
  $name = 'kproxy-remote-'
  $flags = 1
  if ($Local) { $name = 'kproxy-source-vip-'; $flags = 0 } elseif ($HostMacOf -ne '') { $name = 'kproxy-service-vip-' }
  $settings = [ordered]@{ SchemaVersion = @{ Major = 2; Minor = 0 }; Name = ($name + $Ip); IpConfigurations = @(@{ IpAddress = $Ip }); MacAddress = $Mac; Flags = $flags; Policies = @() }
  if ($ProviderAddress -ne '') { $settings.Policies = @(@{ Type = 'ProviderAddress'; Settings = @{ ProviderAddress = $ProviderAddress } }) }
  try {
    [KProxy.Hcn]::CreateEndpoint($KpNetworkId, $Id, (ConvertTo-Json -Compress -Depth 6 -InputObject $settings))
    $KpResult.createdEndpoints += $Id
    $KpRemoteIds[$Id] = $true
  } catch { $KpResult.errors += [ordered]@{ id = $Id; error = $_.Exception.Message } }
}
function Find-KpNetwork([string] $Name) {
  $filter = ConvertTo-Json -Compress -InputObject @{ Name = $Name }
  $query = ConvertTo-Json -Compress -InputObject @{ SchemaVersion = @{ Major = 2; Minor = 0 }; Flags = 0; Filter = $filter }
  $ids = @(ConvertFrom-KpList ([KProxy.Hcn]::EnumerateNetworks($query)))
  if ($ids.Count -ne 1) { return $null }
  return ConvertFrom-Json ([KProxy.Hcn]::QueryNetwork([string]$ids[0], $KpQuery))
}
function New-KpLoadBalancer([string] $Id, [string[]] $Vips, [int] $Protocol, [int] $InternalPort, [int] $ExternalPort, [int] $Flags, [int] $PortFlags, [int] $Distribution, [string] $SourceVip, [string[]] $LocalIps, [string[]] $RemoteIds, [string[]] $EndpointNames, [switch] $Replace) {
  $endpointIds = @()
  $missing = $false
  foreach ($remoteId in $RemoteIds) {
    if ($KpRemoteIds.ContainsKey($remoteId)) { $endpointIds += $remoteId } else { $missing = $true }
  }
  foreach ($ip in $LocalIps) {
    if ($KpLocalIds.ContainsKey($ip)) { $endpointIds += $KpLocalIds[$ip] } else { $KpResult.missingLocal += $ip; $missing = $true }
  }
  foreach ($name in $EndpointNames) {
    if ($KpNamedIds.ContainsKey($name)) { $endpointIds += $KpNamedIds[$name] } else { $KpResult.missingLocal += $name; $missing = $true }
  }
  if ($Replace) {
    if ($missing) { $KpResult.incomplete += $Id; return }
    try { [KProxy.Hcn]::DeleteLoadBalancer($Id) } catch { $KpResult.incomplete += $Id; $KpResult.errors += [ordered]@{ id = $Id; error = $_.Exception.Message }; return }
  }
  if ($endpointIds.Count -eq 0) { $KpResult.skipped += $Id; return }
  $mapping = [ordered]@{ Protocol = $Protocol; InternalPort = $InternalPort; ExternalPort = $ExternalPort; DistributionType = $Distribution; Flags = $PortFlags }
  $settings = [ordered]@{ SchemaVersion = @{ Major = 2; Minor = 0 }; HostComputeEndpoints = @($endpointIds); SourceVIP = $SourceVip; FrontendVIPs = @($Vips); PortMappings = @($mapping); Flags = $Flags }
  if ($SourceVip -eq '') { $settings.Remove('SourceVIP') }
  try {
    [KProxy.Hcn]::CreateLoadBalancer($Id, (ConvertTo-Json -Compress -Depth 6 -InputObject $settings))
    if ($missing) { $KpResult.incomplete += $Id } else { $KpResult.createdLoadBalancers += $Id }
  } catch {
    if ($Replace) { $KpResult.deleted += $Id }
    $KpResult.errors += [ordered]@{ id = $Id; error = $_.Exception.Message }
  }
}
`;

/**
 * Resolves the network, its overlay remote subnets, its local endpoints by IP
 * and its remote endpoints by id (hashtable keys ignore case, as HNS ids do).
 */
function networkSection(networkName: string): string {
  return `$KpNetworkName = ${psQuote(networkName)}
$KpNetwork = Find-KpNetwork $KpNetworkName
if ($null -eq $KpNetwork) { throw ('Cannot find HNS network ' + $KpNetworkName) }
$KpNetworkId = [string]$KpNetwork.ID
$KpLocalIds = @{}
$KpRemoteIds = @{}
$KpNamedIds = @{}
foreach ($ep in @(Get-KpEndpoints)) {
  if ($ep.PSObject.Properties['Name'] -and -not $KpNamedIds.ContainsKey([string]$ep.Name)) { $KpNamedIds[[string]$ep.Name] = [string]$ep.ID }
  if ($ep.HostComputeNetwork -ne $KpNetworkId) { continue }
  if (($ep.Flags -band 1) -ne 0) { $KpRemoteIds[[string]$ep.ID] = $true; continue }
  foreach ($config in @($ep.IpConfigurations)) { $KpLocalIds[[string]$config.IpAddress] = [string]$ep.ID }
}
`;
}

/**
 * Renders the script that lists every HNS load balancer and endpoint of the
 * node, and the network named `networkName` (null when there is no such
 * network, or no name); it prints
 * `{"loadBalancers":[…],"endpoints":[…],"network":{…}}` (HCN properties).
 */
export function renderListScript(networkName = ""): string {
  const network = networkName === "" ? "$null" : `(Find-KpNetwork ${psQuote(networkName)})`;
  return `${PROLOGUE}
$KpList = [ordered]@{ loadBalancers = @(Get-KpLoadBalancers); endpoints = @(Get-KpEndpoints); network = ${network} }
ConvertTo-Json -Compress -Depth 8 -InputObject $KpList
`;
}

/**
 * Renders the script applying `changes`: delete load balancers, then
 * endpoints, create remote endpoints, then load balancers. A load balancer is
 * created with those of its endpoints that exist, and reported `incomplete`
 * when some are missing (a remote endpoint HNS refused, a local one the CNI
 * plugin has not created yet); one to replace is deleted and created again
 * only once all its endpoints exist. Each step that fails is reported in
 * `errors`; the script itself only fails when the network cannot be found or
 * the HCN shim cannot load.
 *
 * @throws {TypeError} or {RangeError} on a value that is not a GUID, IP, MAC or in range
 */
export function renderSyncScript(changes: HnsChanges, options: SyncScriptOptions): string {
  const lines: string[] = [];
  for (const id of changes.deleteLoadBalancers) {
    lines.push(`Remove-KpLoadBalancer ${psQuote(checkGuid(id))}`);
  }
  for (const id of changes.deleteEndpoints) {
    lines.push(`Remove-KpEndpoint ${psQuote(checkGuid(id))}`);
  }
  for (const ep of changes.createEndpoints) {
    const hostMacOf = ep.hostMacOf ?? "";
    if (hostMacOf === "" ? !MAC.test(ep.mac) : ep.mac !== "") {
      throw new TypeError(`Cannot use MAC "${ep.mac}" in an HNS script`);
    }
    lines.push(
      `New-KpRemoteEndpoint -Id ${psQuote(checkGuid(ep.id))} -Ip ${psQuote(checkIp(ep.ip))} ` +
        `-Mac ${psQuote(ep.mac)} -ProviderAddress ${
          psQuote(ep.providerAddress === "" ? "" : checkIp(ep.providerAddress))
        }` +
        (hostMacOf === "" ? "" : ` -HostMacOf ${psQuote(checkIp(hostMacOf))}`) +
        (ep.local ? " -Local" : ""),
    );
  }
  const creations = [
    ...changes.createLoadBalancers.map((lb) => ({ lb, replace: false })),
    ...(changes.replaceLoadBalancers ?? []).map((lb) => ({ lb, replace: true })),
  ];
  for (const { lb, replace } of creations) {
    const named = lb.backends.flatMap((b) => b.endpointName === undefined ? [] : [b.endpointName]);
    const local = lb.backends.filter((b) => b.isLocal && b.endpointName === undefined).map((b) =>
      checkIp(b.ip)
    );
    const remote = lb.backends.filter((b) => !b.isLocal).map((b) => checkGuid(b.remoteEndpointId));
    lines.push(
      [
        "New-KpLoadBalancer",
        `-Id ${psQuote(checkGuid(lb.id))}`,
        `-Vips ${psArray(lb.vip === "" ? [] : [checkIp(lb.vip)])}`,
        `-Protocol ${psInt(lb.protocol, 255)}`,
        `-InternalPort ${psInt(lb.internalPort, 65535)}`,
        `-ExternalPort ${psInt(lb.externalPort, 65535)}`,
        `-Flags ${psInt(lb.flags, 0xffff)}`,
        `-PortFlags ${psInt(lb.portFlags, 0xffff)}`,
        `-Distribution ${psInt(lb.distribution, 3)}`,
        `-SourceVip ${psQuote(lb.sourceVip === "" ? "" : checkIp(lb.sourceVip))}`,
        `-LocalIps ${psArray(local)}`,
        `-RemoteIds ${psArray(remote)}`,
        ...(named.length > 0 ? [`-EndpointNames ${psArray(named)}`] : []),
        ...(replace ? ["-Replace"] : []),
      ].join(" "),
    );
  }
  const needsNetwork = changes.createEndpoints.length > 0 || creations.length > 0;
  return [
    PROLOGUE,
    needsNetwork ? networkSection(options.networkName) : "",
    ...lines,
    "ConvertTo-Json -Compress -Depth 4 -InputObject $KpResult",
    "",
  ].join("\n");
}

/**
 * Parses the JSON line a sync script prints (the last non-empty line of stdout).
 *
 * @throws {TypeError} when the output is not such a reply
 */
export function parseSyncReply(stdout: string): HnsSyncReply {
  const value = parseLastJson(stdout);
  const list = (key: string): string[] => {
    const items = value[key] ?? [];
    const array = Array.isArray(items) ? items : [items];
    if (!array.every((item) => typeof item === "string")) {
      throw new TypeError(`Cannot parse HNS reply: "${key}" is not a list of strings`);
    }
    return array as string[];
  };
  const errors = value.errors ?? [];
  return {
    createdLoadBalancers: list("createdLoadBalancers"),
    createdEndpoints: list("createdEndpoints"),
    deleted: list("deleted"),
    skipped: list("skipped"),
    missingLocal: list("missingLocal"),
    incomplete: list("incomplete"),
    errors: (Array.isArray(errors) ? errors : [errors]).map((item) => ({
      id: String(item?.id ?? ""),
      error: String(item?.error ?? ""),
    })),
  };
}

/** Ids of the HNS objects a list script reported, and the network it was asked for. */
export interface HnsListing {
  loadBalancerIds: string[];
  endpointIds: string[];
  /** Names of the endpoints that have one. */
  endpointNames: string[];
  /** How many endpoints each load balancer holds, by lower-case id. */
  loadBalancerEndpoints: Map<string, number>;
  /** Undefined when the script was given no network name or HNS has no such network. */
  network?: HnsNetworkInfo;
}

/**
 * Parses the output of {@linkcode renderListScript} into ids.
 *
 * @throws {TypeError} when the output is not such a listing
 */
export function parseListReply(stdout: string): HnsListing {
  const value = parseLastJson(stdout);
  const ids = (key: string) => {
    const items = value[key] ?? [];
    return (Array.isArray(items) ? items : [items]).map((item) => {
      const id = item?.ID ?? item?.Id ?? item?.id;
      if (typeof id !== "string") {
        throw new TypeError(`Cannot parse HNS listing: an item of "${key}" has no ID`);
      }
      return id.toLowerCase();
    });
  };
  return {
    loadBalancerIds: ids("loadBalancers"),
    endpointIds: ids("endpoints"),
    loadBalancerEndpoints: new Map(
      (Array.isArray(value.loadBalancers) ? value.loadBalancers : [value.loadBalancers])
        .filter((item: any) => typeof item?.ID === "string")
        .map((item: any) => [
          item.ID.toLowerCase(),
          Array.isArray(item.HostComputeEndpoints) ? item.HostComputeEndpoints.length : 0,
        ]),
    ),
    endpointNames: (Array.isArray(value.endpoints) ? value.endpoints : [value.endpoints])
      .flatMap((item: any) => typeof item?.Name === "string" ? [item.Name] : []),
    network: parseNetwork(value.network),
  };
}

/** The type and remote subnet routes of a HostComputeNetwork; malformed routes are skipped. */
function parseNetwork(value: unknown): HnsNetworkInfo | undefined {
  if (typeof value !== "object" || value === null) return undefined;
  const network = value as Record<string, unknown>;
  if (typeof network.Type !== "string") {
    throw new TypeError("Cannot parse HNS listing: the network has no Type");
  }
  const policies = Array.isArray(network.Policies) ? network.Policies : [];
  const remoteSubnets: RemoteSubnet[] = [];
  for (const policy of policies) {
    if (policy?.Type !== "RemoteSubnetRoute") continue;
    const { DestinationPrefix, ProviderAddress } = policy.Settings ?? {};
    if (typeof DestinationPrefix !== "string" || parseIP(ProviderAddress ?? "") === undefined) {
      continue;
    }
    remoteSubnets.push({ destinationPrefix: DestinationPrefix, providerAddress: ProviderAddress });
  }
  return { type: network.Type, remoteSubnets };
}

function parseLastJson(stdout: string): Record<string, any> {
  const line = stdout.trim().split(/\r?\n/).filter((l) => l.trim() !== "").at(-1) ?? "";
  let value: unknown;
  try {
    value = JSON.parse(line);
  } catch (error) {
    throw new TypeError(
      `Cannot parse HNS reply "${line.slice(0, 200)}": ${(error as Error).message}`,
    );
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new TypeError(`Cannot parse HNS reply "${line.slice(0, 200)}": not a JSON object`);
  }
  return value as Record<string, any>;
}
