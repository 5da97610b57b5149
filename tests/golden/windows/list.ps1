
$KpList = [ordered]@{ loadBalancers = @(Get-KpLoadBalancers); endpoints = @(Get-KpEndpoints) }
ConvertTo-Json -Compress -Depth 8 -InputObject $KpList
