# Checks PowerShell scripts with PowerShell's own parser for what Windows PowerShell 5.1
# cannot run: parse errors, syntax added in 6 or 7 (?? and ??=, ?. and ?[], ternaries,
# && and || pipeline chains, clean blocks), 7-only cmdlets and parameters, and C# in
# Add-Type that the C# 5 compiler of Windows PowerShell rejects. Also lists the commands
# each script runs. Input (stdin): JSON [{ "name": ..., "text": ... }]. Output: JSON
# [{ "name": ..., "problems": [...], "commands": [...] }].
# Run by tests/windows/powershell_parse_test.ts.
using namespace System.Management.Automation.Language
$ErrorActionPreference = 'Stop'
Set-StrictMode -Version 3.0

# Parameters Windows PowerShell 5.1 does not have, by cmdlet.
$NewParameters = @{
  'ForEach-Object' = @('Parallel', 'ThrottleLimit', 'TimeoutSeconds', 'AsJob', 'UseNewRunspace')
  'ConvertFrom-Json' = @('AsHashtable', 'Depth', 'NoEnumerate', 'DateKind')
  'ConvertTo-Json' = @('AsArray', 'EnumsAsStrings', 'EscapeHandling')
  'Join-Path' = @('AdditionalChildPath')
  'Get-Content' = @('AsByteStream')
  'Set-Content' = @('AsByteStream')
  'Add-Content' = @('AsByteStream')
  'Select-String' = @('Raw', 'NoEmphasis')
  'Invoke-WebRequest' = @('SkipCertificateCheck', 'Authentication', 'StatusCodeVariable')
  'Invoke-RestMethod' = @('SkipCertificateCheck', 'Authentication', 'StatusCodeVariable')
  'Get-Date' = @('AsUTC', 'UnixTimeSeconds')
  'Test-Connection' = @('TargetName', 'TcpPort')
  'Split-Path' = @('Extension', 'LeafBase')
}
# Commands Windows PowerShell 5.1 does not have.
$NewCommands = @('Test-Json', 'Get-Error', 'Start-ThreadJob', 'Remove-Alias', 'Join-String',
  'ConvertFrom-Markdown', 'Get-Uptime', 'Remove-Service', 'Set-MarkdownOption')
$Aliases = @{ '%' = 'ForEach-Object'; 'foreach' = 'ForEach-Object' }

function Get-CSharpProblems([string] $Source) {
  $options = [Microsoft.CodeAnalysis.CSharp.CSharpParseOptions]::new(
    [Microsoft.CodeAnalysis.CSharp.LanguageVersion]::CSharp5)
  $tree = [Microsoft.CodeAnalysis.CSharp.CSharpSyntaxTree]::ParseText($Source, $options)
  foreach ($diagnostic in $tree.GetDiagnostics()) {
    if ($diagnostic.Severity -eq 'Error') { 'C# 5: ' + $diagnostic.ToString() }
  }
  # Roslyn reports most language-version limits while binding: compile without references
  # and keep only those (the missing references' errors are not the point here).
  $compilation = [Microsoft.CodeAnalysis.CSharp.CSharpCompilation]::Create('check', [Microsoft.CodeAnalysis.SyntaxTree[]]@($tree))
  foreach ($diagnostic in $compilation.GetDiagnostics()) {
    if ($diagnostic.GetMessage() -match 'not available in C# 5') { 'C# 5: ' + $diagnostic.ToString() }
  }
}

# The constant value of an Add-Type -TypeDefinition argument: a literal, or a variable
# assigned one literal in the same script.
function Get-TypeDefinition([Ast] $Root, [CommandAst] $Command) {
  $elements = $Command.CommandElements
  for ($i = 0; $i -lt $elements.Count - 1; $i++) {
    $element = $elements[$i]
    if ($element -isnot [CommandParameterAst] -or $element.ParameterName -notlike 'TypeDef*') { continue }
    $value = $elements[$i + 1]
    if ($value -is [StringConstantExpressionAst]) { return $value.Value }
    if ($value -is [VariableExpressionAst]) {
      $name = $value.VariablePath.UserPath
      $assignment = $Root.Find({
          param($node)
          $node -is [AssignmentStatementAst] -and $node.Left -is [VariableExpressionAst] -and
          $node.Left.VariablePath.UserPath -eq $name
        }, $true)
      if ($assignment -and $assignment.Right.Expression -is [StringConstantExpressionAst]) {
        return $assignment.Right.Expression.Value
      }
    }
    return $null
  }
  $null
}

function Get-Problems([string] $Text) {
  $tokens = $null
  $errors = $null
  $ast = [Parser]::ParseInput($Text, [ref]$tokens, [ref]$errors)
  foreach ($e in $errors) { "parse error at line $($e.Extent.StartLineNumber): $($e.Message)" }
  $at = { param($node) "line $($node.Extent.StartLineNumber): $($node.Extent.Text)" }
  foreach ($node in $ast.FindAll({ $true }, $true)) {
    if ($node -is [TernaryExpressionAst]) { 'ternary operator (7.0), ' + (& $at $node) }
    elseif ($node -is [PipelineChainAst]) { '&& or || pipeline chain (7.0), ' + (& $at $node) }
    elseif ($node -is [BinaryExpressionAst] -and $node.Operator -eq [TokenKind]::QuestionQuestion) {
      '?? operator (7.0), ' + (& $at $node)
    }
    elseif ($node -is [AssignmentStatementAst] -and $node.Operator -eq [TokenKind]::QuestionQuestionEquals) {
      '??= operator (7.0), ' + (& $at $node)
    }
    elseif ($node -is [MemberExpressionAst] -and $node.NullConditional) { '?. operator (7.0), ' + (& $at $node) }
    elseif ($node -is [IndexExpressionAst] -and $node.NullConditional) { '?[] operator (7.0), ' + (& $at $node) }
    elseif ($node -is [NamedBlockAst] -and $node.BlockKind -eq 'Clean') { 'clean block (7.3), ' + (& $at $node) }
    elseif ($node -is [CommandAst]) {
      $name = $node.GetCommandName()
      if ($null -eq $name) { continue }
      if ($Aliases.ContainsKey($name)) { $name = $Aliases[$name] }
      if ($NewCommands -contains $name) { "command $name (not in 5.1), " + (& $at $node) }
      if ($NewParameters.ContainsKey($name)) {
        foreach ($parameter in @($node.CommandElements | Where-Object { $_ -is [CommandParameterAst] })) {
          foreach ($new in $NewParameters[$name]) {
            if ($new -like ($parameter.ParameterName + '*')) {
              "$name -$($parameter.ParameterName) (not in 5.1), " + (& $at $node)
            }
          }
        }
      }
      if ($name -eq 'Add-Type') {
        $source = Get-TypeDefinition $ast $node
        if ($null -ne $source) { Get-CSharpProblems $source }
      }
    }
  }
}

function Get-Commands([string] $Text) {
  $ast = [Parser]::ParseInput($Text, [ref]$null, [ref]$null)
  foreach ($command in $ast.FindAll({ param($node) $node -is [CommandAst] }, $true)) {
    $name = $command.GetCommandName()
    if ($null -eq $name) { '&' + $command.CommandElements[0].Extent.Text } else { $name }
  }
}

$inputs = [Console]::In.ReadToEnd() | ConvertFrom-Json
$results = foreach ($script in $inputs) {
  [ordered]@{
    name = $script.name
    problems = @(Get-Problems $script.text)
    commands = @(Get-Commands $script.text)
  }
}
ConvertTo-Json -Compress -Depth 4 -InputObject @($results)
