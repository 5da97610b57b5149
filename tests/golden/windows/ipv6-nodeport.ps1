
$KpNetworkName = 'cbr0'
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

New-KpLoadBalancer -Id '6b70726f-0001-2287-c35c-93080dd83381' -Vips @('fd00:96::10') -Protocol 6 -InternalPort 8080 -ExternalPort 80 -Flags 2 -PortFlags 0 -Distribution 0 -SourceVip '' -LocalIps @('fd00:244::5') -RemoteIds @()
New-KpLoadBalancer -Id '6b70726f-0001-a56d-da2d-9c88e7c90f60' -Vips @() -Protocol 6 -InternalPort 8080 -ExternalPort 30080 -Flags 2 -PortFlags 18 -Distribution 0 -SourceVip '' -LocalIps @('fd00:244::5') -RemoteIds @()
ConvertTo-Json -Compress -Depth 4 -InputObject $KpResult
