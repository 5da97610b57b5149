<#
.SYNOPSIS
Installs kproxy.exe as a Windows service (automatic start, restart on failure).

.DESCRIPTION
A `deno compile`d kproxy.exe is a console program: it does not speak the
Service Control Manager protocol, so the SCM would kill it after 30 s. This
script therefore builds a tiny service host (kproxy-service.exe, C# compiled
by Windows PowerShell's Add-Type from the source below) next to kproxy.exe.
The host starts kproxy.exe with the given arguments, appends its output to a
log file, stops it when the service stops, and exits with an error when
kproxy.exe dies, so the SCM failure actions restart it.

Build kproxy.exe on any machine with the Windows runtime cached:
  deno task compile --target=x86_64-pc-windows-msvc --apiserver=HOST:PORT
(which runs `deno compile --target x86_64-pc-windows-msvc ... main.ts`).

.EXAMPLE
.\install-service.ps1 -ConfigPath C:\etc\kproxy\config.yaml
#>
#Requires -RunAsAdministrator
[CmdletBinding()]
param(
  # The KubeProxyConfiguration file passed as --config.
  [Parameter(Mandatory = $true)] [string] $ConfigPath,
  [string] $BinaryPath = (Join-Path $env:ProgramFiles 'kproxy\kproxy.exe'),
  [string] $ServiceName = 'kproxy',
  [string] $LogPath = (Join-Path $env:ProgramData 'kproxy\kproxy.log'),
  # Extra kproxy flags, e.g. '--v=2', '--hostname-override=node-a'.
  [string[]] $ExtraArguments = @(),
  # Start the service once installed.
  [switch] $NoStart
)

$ErrorActionPreference = 'Stop'

foreach ($path in @($BinaryPath, $ConfigPath)) {
  if (-not (Test-Path -LiteralPath $path -PathType Leaf)) { throw "Cannot install kproxy: '$path' does not exist" }
}
if ($ServiceName -notmatch '^[A-Za-z0-9_.-]{1,64}$') { throw "Cannot install kproxy: invalid service name '$ServiceName'" }
if (Get-Service -Name $ServiceName -ErrorAction SilentlyContinue) {
  throw "Cannot install kproxy: service '$ServiceName' exists; run uninstall-service.ps1 first"
}
$BinaryPath = (Resolve-Path -LiteralPath $BinaryPath).Path
$ConfigPath = (Resolve-Path -LiteralPath $ConfigPath).Path
$null = New-Item -ItemType Directory -Force -Path (Split-Path -Parent $LogPath)

$hostSource = @'
using System;
using System.Diagnostics;
using System.IO;
using System.ServiceProcess;
using System.Text;

public sealed class KproxyServiceHost : ServiceBase {
  readonly string binary, arguments, logPath;
  Process child;
  StreamWriter log;
  volatile bool stopping;

  KproxyServiceHost(string binary, string arguments, string logPath) {
    this.binary = binary; this.arguments = arguments; this.logPath = logPath;
    ServiceName = "kproxy"; CanStop = true; CanShutdown = true;
  }

  protected override void OnStart(string[] ignored) {
    log = new StreamWriter(new FileStream(logPath, FileMode.Append, FileAccess.Write, FileShare.ReadWrite), Encoding.UTF8);
    log.AutoFlush = true;
    var info = new ProcessStartInfo(binary, arguments) {
      UseShellExecute = false, RedirectStandardOutput = true, RedirectStandardError = true, CreateNoWindow = true,
    };
    // Deno's default TLS root store empty ("," names no store; Windows drops an
    // empty value): the cluster's CA is kproxy's only trust anchor.
    if (Environment.GetEnvironmentVariable("DENO_TLS_CA_STORE") == null) {
      info.Environment["DENO_TLS_CA_STORE"] = ",";
    }
    child = new Process { StartInfo = info, EnableRaisingEvents = true };
    child.OutputDataReceived += (s, e) => { if (e.Data != null) Write(e.Data); };
    child.ErrorDataReceived += (s, e) => { if (e.Data != null) Write(e.Data); };
    child.Exited += (s, e) => {
      if (stopping) return;
      Write("kproxy exited with status " + child.ExitCode + "; failing the service so the SCM restarts it");
      ExitCode = child.ExitCode == 0 ? 1 : child.ExitCode;
      Environment.Exit(ExitCode);
    };
    child.Start();
    child.BeginOutputReadLine();
    child.BeginErrorReadLine();
    Write("started " + binary + " " + arguments);
  }

  protected override void OnStop() { StopChild(); }
  protected override void OnShutdown() { StopChild(); }

  void StopChild() {
    stopping = true;
    try { if (child != null && !child.HasExited) { child.Kill(); child.WaitForExit(10000); } } catch (Exception e) { Write("stop: " + e.Message); }
    Write("stopped");
  }

  void Write(string line) {
    lock (this) { if (log != null) log.WriteLine(DateTime.UtcNow.ToString("o") + " " + line); }
  }

  // Usage: kproxy-service.exe <kproxy.exe> <log file> <kproxy arguments...>
  public static void Main(string[] args) {
    var rest = new StringBuilder();
    for (int i = 2; i < args.Length; i++) { if (rest.Length > 0) rest.Append(' '); rest.Append(Quote(args[i])); }
    Run(new KproxyServiceHost(args[0], rest.ToString(), args[1]));
  }

  // Windows command-line quoting (CommandLineToArgvW rules).
  static string Quote(string arg) {
    if (arg.Length > 0 && arg.IndexOfAny(new[] { ' ', '\t', '"' }) < 0) return arg;
    var quoted = new StringBuilder("\"");
    int slashes = 0;
    foreach (char c in arg) {
      if (c == '\\') { slashes++; continue; }
      if (c == '"') { quoted.Append('\\', slashes * 2 + 1); quoted.Append('"'); }
      else { quoted.Append('\\', slashes); quoted.Append(c); }
      slashes = 0;
    }
    quoted.Append('\\', slashes * 2);
    quoted.Append('"');
    return quoted.ToString();
  }
}
'@

$hostPath = Join-Path (Split-Path -Parent $BinaryPath) 'kproxy-service.exe'
Add-Type -TypeDefinition $hostSource -OutputAssembly $hostPath -OutputType ConsoleApplication `
  -ReferencedAssemblies 'System.ServiceProcess'

function ConvertTo-CommandLineArgument([string] $Value) {
  if ($Value -ne '' -and $Value -notmatch '[\s"]') { return $Value }
  return '"' + ($Value -replace '(\\*)"', '$1$1\"' -replace '(\\+)$', '$1$1') + '"'
}

$arguments = @($hostPath, $BinaryPath, $LogPath, "--config=$ConfigPath", '--proxy-mode=kernelspace') + $ExtraArguments
$commandLine = ($arguments | ForEach-Object { ConvertTo-CommandLineArgument $_ }) -join ' '

New-Service -Name $ServiceName -BinaryPathName $commandLine -StartupType Automatic `
  -DisplayName 'kproxy (Kubernetes service proxy)' `
  -Description 'Programs HNS load balancers for Kubernetes Services (drop-in kube-proxy, kernelspace mode).' | Out-Null

# Restart after 5 s, 5 s, then 30 s; forget failures after a day; also restart on a non-zero exit.
& sc.exe failure $ServiceName reset= 86400 actions= restart/5000/restart/5000/restart/30000 | Out-Null
if ($LASTEXITCODE -ne 0) { throw "Cannot set failure actions of '$ServiceName' (sc.exe exit $LASTEXITCODE)" }
& sc.exe failureflag $ServiceName 1 | Out-Null
if ($LASTEXITCODE -ne 0) { throw "Cannot set failure flag of '$ServiceName' (sc.exe exit $LASTEXITCODE)" }

if (-not $NoStart) { Start-Service -Name $ServiceName }
Write-Host "Installed service '$ServiceName': $commandLine"
Write-Host "Log: $LogPath"
