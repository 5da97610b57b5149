
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

New-KpRemoteEndpoint -Id '6b70726f-0002-8f20-6dac-947c3a273b41' -Ip '10.96.0.10' -Mac '' -ProviderAddress '10.201.0.1' -HostMacOf '10.201.0.1'
New-KpRemoteEndpoint -Id '6b70726f-0002-aa80-7097-5a26b3e566d2' -Ip '10.244.2.7' -Mac '02-11-0a-f4-02-07' -ProviderAddress '192.168.1.12'
New-KpRemoteEndpoint -Id '6b70726f-0002-c173-07a7-7d1bb7b5e172' -Ip '10.244.1.2' -Mac '' -ProviderAddress '' -HostMacOf '10.201.0.1' -Local
New-KpLoadBalancer -Id '6b70726f-0001-6236-967f-35539deadf16' -Vips @('10.96.0.10') -Protocol 6 -InternalPort 8080 -ExternalPort 80 -Flags 0 -PortFlags 0 -Distribution 0 -SourceVip '10.244.1.2' -LocalIps @('10.244.1.5') -RemoteIds @('6b70726f-0002-aa80-7097-5a26b3e566d2')
New-KpLoadBalancer -Id '6b70726f-0001-9e1d-4a08-6549464c7ed1' -Vips @() -Protocol 6 -InternalPort 8080 -ExternalPort 30080 -Flags 0 -PortFlags 18 -Distribution 0 -SourceVip '10.244.1.2' -LocalIps @('10.244.1.5') -RemoteIds @('6b70726f-0002-aa80-7097-5a26b3e566d2')
ConvertTo-Json -Compress -Depth 4 -InputObject $KpResult
