<#
.SYNOPSIS
Stops and removes the kproxy Windows service, its service host and its log, and optionally
the HNS objects kproxy created.

.EXAMPLE
.\uninstall-service.ps1 -Cleanup
#>
#Requires -RunAsAdministrator
[CmdletBinding()]
param(
  [string] $ServiceName = 'kproxy',
  [string] $BinaryPath = (Join-Path $env:ProgramFiles 'kproxy\kproxy.exe'),
  # Run `kproxy.exe --cleanup --proxy-mode=kernelspace` after removing the service:
  # deletes every HNS load balancer and remote endpoint kproxy created.
  [switch] $Cleanup,
  [string] $ConfigPath = '',
  # The log file install-service.ps1 was given; removed with its directory when that is empty.
  [string] $LogPath = (Join-Path $env:ProgramData 'kproxy\kproxy.log'),
  # Keep the log file.
  [switch] $KeepLog
)

$ErrorActionPreference = 'Stop'

if ($ServiceName -notmatch '^[A-Za-z0-9_.-]{1,64}$') { throw "Cannot uninstall: invalid service name '$ServiceName'" }
$service = Get-Service -Name $ServiceName -ErrorAction SilentlyContinue
if ($service) {
  if ($service.Status -ne 'Stopped') { Stop-Service -Name $ServiceName -Force }
  & sc.exe delete $ServiceName | Out-Null
  if ($LASTEXITCODE -ne 0) { throw "Cannot delete service '$ServiceName' (sc.exe exit $LASTEXITCODE)" }
  Write-Host "Removed service '$ServiceName'"
} else {
  Write-Host "Service '$ServiceName' is not installed"
}

$hostPath = Join-Path (Split-Path -Parent $BinaryPath) 'kproxy-service.exe'
if (Test-Path -LiteralPath $hostPath) { Remove-Item -LiteralPath $hostPath -Force }

if ($Cleanup) {
  $arguments = @('--cleanup', '--proxy-mode=kernelspace')
  if ($ConfigPath -ne '') { $arguments += "--config=$ConfigPath" }
  & $BinaryPath @arguments
  if ($LASTEXITCODE -ne 0) { throw "kproxy --cleanup failed (exit $LASTEXITCODE)" }
  Write-Host 'Removed kproxy HNS load balancers and remote endpoints'
}

if (-not $KeepLog) {
  if (Test-Path -LiteralPath $LogPath) { Remove-Item -LiteralPath $LogPath -Force }
  $logDirectory = Split-Path -Parent $LogPath
  if ((Test-Path -LiteralPath $logDirectory) -and -not (Get-ChildItem -LiteralPath $logDirectory -Force)) {
    Remove-Item -LiteralPath $logDirectory -Force
  }
}
