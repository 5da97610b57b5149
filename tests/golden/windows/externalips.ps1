
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

New-KpRemoteEndpoint -Id '6b70726f-0002-5740-5434-a00d3c59af13' -Ip '10.244.2.7' -Mac '02-11-0a-f4-02-07' -ProviderAddress ''
New-KpLoadBalancer -Id '6b70726f-0001-368e-5f79-bf5172a81ed3' -Vips @('10.96.0.10') -Protocol 6 -InternalPort 8080 -ExternalPort 80 -Flags 0 -PortFlags 0 -Distribution 0 -SourceVip '' -LocalIps @('10.244.1.5') -RemoteIds @('6b70726f-0002-5740-5434-a00d3c59af13')
New-KpLoadBalancer -Id '6b70726f-0001-df9a-cd81-1278ff40a4c0' -Vips @('198.51.100.20') -Protocol 6 -InternalPort 8080 -ExternalPort 80 -Flags 0 -PortFlags 16 -Distribution 0 -SourceVip '' -LocalIps @('10.244.1.5') -RemoteIds @('6b70726f-0002-5740-5434-a00d3c59af13')
ConvertTo-Json -Compress -Depth 4 -InputObject $KpResult
