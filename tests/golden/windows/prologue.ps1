$ErrorActionPreference = 'Stop'
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
  const string Query = "{\"SchemaVersion\":{\"Major\":2,\"Minor\":0},\"Flags\":0}";
  static void Kept(string properties, string id, string what) {
    if (new Guid(id) == Guid.Empty) return;
    if (properties.IndexOf("\"" + id + "\"", StringComparison.OrdinalIgnoreCase) < 0) throw new Exception(what + ": HNS did not keep the id " + id + " kproxy asked for: " + properties);
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
