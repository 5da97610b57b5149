
$KpList = [ordered]@{ loadBalancers = @(Get-KpLoadBalancers); endpoints = @(Get-KpEndpoints); network = (Find-KpNetwork 'cbr0') }
ConvertTo-Json -Compress -Depth 8 -InputObject $KpList
