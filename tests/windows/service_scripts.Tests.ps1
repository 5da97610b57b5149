# Pester tests of scripts/windows/install-service.ps1 and uninstall-service.ps1,
# run in PowerShell 7 on Linux with the service-control and file-system commands
# mocked by a fake Service Control Manager and file system, and of the service
# host's C# source (compiled with Add-Type) and its argument quoting.
# Run by tests/windows/service_scripts_test.ts.

BeforeAll {
  # What Windows sets; the scripts' parameter defaults use them.
  $env:ProgramFiles = 'C:\Program Files'
  $env:ProgramData = 'C:\ProgramData'
  $script:Install = Join-Path $PSScriptRoot '../../scripts/windows/install-service.ps1'
  $script:Uninstall = Join-Path $PSScriptRoot '../../scripts/windows/uninstall-service.ps1'
  $script:Kproxy = 'C:\Program Files\kproxy\kproxy.exe'
  $script:HostExe = 'C:\Program Files\kproxy\kproxy-service.exe'
  $script:Config = 'C:\etc\kproxy\config.yaml'
  $script:LogPath = 'C:\ProgramData\kproxy logs\kproxy.log'

  # Windows-only commands stand in as functions with the parameters the scripts use, so
  # Pester can mock them here: sc.exe (a native program) and the service cmdlets.
  function global:sc.exe { $global:LASTEXITCODE = 0 }
  if (-not (Get-Command Get-Service -ErrorAction SilentlyContinue)) {
    function global:Get-Service { [CmdletBinding()] param([string] $Name) }
    function global:New-Service {
      [CmdletBinding()]
      param([string] $Name, [string] $BinaryPathName, [string] $StartupType, [string] $DisplayName,
        [string] $Description)
    }
    function global:Start-Service { [CmdletBinding()] param([string] $Name) }
    function global:Stop-Service { [CmdletBinding()] param([string] $Name, [switch] $Force) }
  }

  # Splits a command line the way Windows programs do (CommandLineToArgvW rules), using
  # .NET's own implementation of those rules: printf receives the arguments and prints
  # one per line.
  function script:Split-CommandLine([string] $CommandLine) {
    $info = [System.Diagnostics.ProcessStartInfo]::new('printf', '"%s\n" ' + $CommandLine)
    $info.RedirectStandardOutput = $true
    $info.UseShellExecute = $false
    $process = [System.Diagnostics.Process]::Start($info)
    $out = $process.StandardOutput.ReadToEnd()
    $process.WaitForExit()
    $out.TrimEnd("`n").Split("`n")
  }

  # A fake machine: services by name, the files and directories that exist, and the
  # sc.exe command lines run. Global, because mocks run in Pester's own scope.
  function script:Reset-Machine {
    $global:Services = @{}
    $global:Files = [System.Collections.Generic.HashSet[string]]::new([string[]]@($Kproxy, $Config))
    $global:ScCalls = [System.Collections.Generic.List[string]]::new()
  }

  function script:Use-FakeMachine {
    # Windows path rules, whatever the host's: no drive lookups, backslash separators.
    Mock Split-Path -ParameterFilter { $Parent } { $Path.Substring(0, $Path.LastIndexOfAny([char[]]'\/')) }
    Mock Join-Path { $Path.TrimEnd('\') + '\' + $ChildPath }
    Mock Test-Path { $global:Files.Contains($LiteralPath) }
    Mock Resolve-Path { [pscustomobject]@{ Path = $LiteralPath } }
    Mock New-Item { $null = $global:Files.Add($Path) }
    Mock Remove-Item { $null = $global:Files.Remove($LiteralPath) }
    Mock Get-ChildItem { $global:Files | Where-Object { $_.StartsWith($LiteralPath + '\') } }
    Mock Add-Type { $null = $global:Files.Add($OutputAssembly) }
    Mock Get-Service {
      if ($global:Services.ContainsKey($Name)) { [pscustomobject]$global:Services[$Name] }
    }
    Mock New-Service {
      $global:Services[$Name] = @{ Name = $Name; Status = 'Stopped'; BinaryPathName = $BinaryPathName; StartupType = $StartupType }
    }
    Mock Start-Service { $global:Services[$Name].Status = 'Running' }
    Mock Stop-Service { $global:Services[$Name].Status = 'Stopped' }
    Mock Write-Host {}
    Mock sc.exe {
      $global:ScCalls.Add($args -join ' ')
      if ($args[0] -eq 'delete') { $global:Services.Remove($args[1]) }
      $global:LASTEXITCODE = 0
    }
  }

  function script:Install-Kproxy([hashtable] $Extra = @{}) {
    $parameters = @{ ConfigPath = $Config; BinaryPath = $Kproxy; LogPath = $LogPath } + $Extra
    & $Install @parameters
  }
}

Describe 'install-service.ps1' {
  BeforeAll { Use-FakeMachine }
  BeforeEach { Reset-Machine }

  It 'registers the service: host, kproxy, log path, config and mode, quoted safely' {
    $extra = @('--hostname-override=node "a"', '--v=2', 'C:\dir with space\', '', 'tab	here', 'a\\"b')
    Install-Kproxy @{ ExtraArguments = $extra }
    Should -Invoke New-Service -Times 1 -Exactly -ParameterFilter {
      $Name -eq 'kproxy' -and $StartupType -eq 'Automatic' -and $DisplayName -like 'kproxy*'
    }
    $argv = Split-CommandLine $Services['kproxy'].BinaryPathName
    $argv | Should -Be (@($HostExe, $Kproxy, $LogPath, "--config=$Config", '--proxy-mode=kernelspace') + $extra)
  }

  It 'sets restart-on-failure recovery and the failure flag' {
    Install-Kproxy
    $ScCalls | Should -Be @(
      'failure kproxy reset= 86400 actions= restart/5000/restart/5000/restart/30000',
      'failureflag kproxy 1'
    )
  }

  It 'creates the log directory and compiles the service host next to kproxy.exe' {
    Install-Kproxy
    Should -Invoke New-Item -Times 1 -Exactly -ParameterFilter {
      $ItemType -eq 'Directory' -and $Path -eq 'C:\ProgramData\kproxy logs'
    }
    Should -Invoke Add-Type -Times 1 -Exactly -ParameterFilter {
      $OutputAssembly -eq $HostExe -and $OutputType -eq 'ConsoleApplication' -and
      $ReferencedAssemblies -contains 'System.ServiceProcess'
    }
  }

  It 'starts the service, unless -NoStart' {
    Install-Kproxy
    $Services['kproxy'].Status | Should -Be 'Running'
    Reset-Machine
    Install-Kproxy @{ NoStart = $true }
    $Services['kproxy'].Status | Should -Be 'Stopped'
  }

  It 'uses the service name it is given' {
    Install-Kproxy @{ ServiceName = 'kproxy-2.test_x' }
    $Services.Keys | Should -Be @('kproxy-2.test_x')
    $ScCalls[0] | Should -BeLike 'failure kproxy-2.test_x *'
  }

  It 'refuses the bad service name <name>' -ForEach @(
    @{ Name = 'kp roxy' }, @{ Name = 'a;b' }, @{ Name = "a'b" }, @{ Name = 'a"b' },
    @{ Name = '$(x)' }, @{ Name = 'x' * 65 }, @{ Name = "a`nb" }
  ) {
    { Install-Kproxy @{ ServiceName = $Name } } | Should -Throw '*invalid service name*'
    Should -Invoke New-Service -Times 0
    Should -Invoke Add-Type -Times 0
  }

  It 'refuses to replace an existing service' {
    $Services['kproxy'] = @{ Name = 'kproxy'; Status = 'Running' }
    { Install-Kproxy } | Should -Throw '*exists*'
    Should -Invoke New-Service -Times 0
  }

  It 'refuses a binary that does not exist' {
    $null = $Files.Remove($Kproxy)
    { Install-Kproxy } | Should -Throw '*does not exist*'
    Should -Invoke New-Service -Times 0
  }
}

Describe 'uninstall-service.ps1' {
  BeforeAll { Use-FakeMachine }
  BeforeEach { Reset-Machine }

  It 'stops and deletes the service and removes the host' {
    Install-Kproxy
    & $Uninstall -BinaryPath $Kproxy -LogPath $LogPath
    Should -Invoke Stop-Service -Times 1 -Exactly -ParameterFilter { $Name -eq 'kproxy' }
    $ScCalls[-1] | Should -Be 'delete kproxy'
    $Files.Contains($HostExe) | Should -BeFalse
  }

  It 'leaves nothing behind after an install' {
    $before = @($Files | Sort-Object)
    Install-Kproxy
    $Files.Add($LogPath)
    & $Uninstall -BinaryPath $Kproxy -LogPath $LogPath
    $Services.Count | Should -Be 0
    @($Files | Sort-Object) | Should -Be $before
  }

  It 'keeps the log with -KeepLog' {
    Install-Kproxy
    $Files.Add($LogPath)
    & $Uninstall -BinaryPath $Kproxy -LogPath $LogPath -KeepLog
    $Files.Contains($LogPath) | Should -BeTrue
  }

  It 'refuses the bad service name <name>' -ForEach @(@{ Name = 'a b' }, @{ Name = 'a;b' }) {
    { & $Uninstall -ServiceName $Name -BinaryPath $Kproxy } | Should -Throw '*invalid service name*'
    Should -Invoke sc.exe -Times 0
  }

  It 'does nothing to the SCM when the service is not installed' {
    & $Uninstall -BinaryPath $Kproxy -LogPath $LogPath
    Should -Invoke sc.exe -Times 0
    Should -Invoke Stop-Service -Times 0
  }

  It 'runs kproxy --cleanup with -Cleanup' {
    $dir = [System.IO.Path]::Combine([System.IO.Path]::GetTempPath(), 'kp-uninstall-' + [guid]::NewGuid())
    $null = [System.IO.Directory]::CreateDirectory($dir)
    try {
      $binary = "$dir/kproxy.exe"
      Set-Content -LiteralPath $binary -Value "#!/bin/sh`nprintf '%s\n' `"`$@`" > '$dir/args'"
      chmod +x $binary
      & $Uninstall -BinaryPath $binary -LogPath $LogPath -Cleanup -ConfigPath 'C:\etc\kproxy\my config.yaml'
      Get-Content -LiteralPath "$dir/args" |
        Should -Be @('--cleanup', '--proxy-mode=kernelspace', '--config=C:\etc\kproxy\my config.yaml')
    } finally {
      [System.IO.Directory]::Delete($dir, $true)
    }
  }
}

Describe 'the service host (kproxy-service.exe)' {
  BeforeAll {
    $ast = [System.Management.Automation.Language.Parser]::ParseFile($Install, [ref]$null, [ref]$null)
    $assignment = $ast.Find({
        param($node)
        $node -is [System.Management.Automation.Language.AssignmentStatementAst] -and
        $node.Left.Extent.Text -eq '$hostSource'
      }, $true)
    $script:HostSource = $assignment.Right.Expression.Value
  }

  It 'compiles' {
    $references = @(
      (Join-Path $PSHOME 'System.ServiceProcess.ServiceController.dll'),
      'System.Diagnostics.Process', 'System.ComponentModel.Primitives', 'System.ComponentModel',
      'System.Threading'
    )
    Add-Type -TypeDefinition $HostSource -ReferencedAssemblies $references
    [KproxyServiceHost].BaseType.FullName | Should -Be 'System.ServiceProcess.ServiceBase'
  }

  It 'quotes each argument so that Windows parses it back unchanged' {
    $quote = [KproxyServiceHost].GetMethod('Quote', [System.Reflection.BindingFlags]'NonPublic, Static')
    $arguments = @('plain', 'with space', 'a"b', 'C:\dir with space\', '', 'tab	here', 'a\\"b',
      '\\server\share\', '"', '\', 'x\"', '--hostname-override=node "a"')
    $line = ($arguments | ForEach-Object { $quote.Invoke($null, @(, [string]$_)) }) -join ' '
    Split-CommandLine $line | Should -Be $arguments
  }
}
