/**
 * Representative kube-proxy 1.36 rulesets for the services of an IPv4 Plan,
 * in the shapes upstream's nftables and iptables proxiers write (their
 * golden tests `TestOverallNFTablesRules` / `TestOverallIPTablesRules`):
 * what a node holds when kproxy takes over from kube-proxy, or what
 * kube-proxy writes when it takes the node back. For kernel tests and the
 * takeover bench; not a second proxy (no session affinity, no
 * externalTrafficPolicy Local, no IPv6 services).
 *
 * @module
 */

import {
  endpointChainName,
  endpointString,
  hash16,
  serviceChainNames,
} from "../backends/iptables/names.ts";
import type { Plan, ServicePortPlan } from "../lib/core/plan.ts";

/** The nfacct counters kube-proxy's iptables rules name; they must exist before the rules load. */
export const KUBE_PROXY_NFACCT = ["ct_state_invalid_dropped_pkts", "localhost_nps_accepted_pkts"];

const MARK = "0x4000";

function clusterCIDR(plan: Plan): string {
  const detector = plan.localTraffic;
  if (detector.mode !== "ClusterCIDR" || detector.cidrs.length === 0) {
    throw new RangeError("Cannot render kube-proxy rules: want a ClusterCIDR local-traffic plan");
  }
  return detector.cidrs[0]!;
}

function nftName(kind: string, service: ServicePortPlan, suffix = ""): string {
  const base = `${service.namespace}/${service.name}/${service.protocol.toLowerCase()}/${
    service.portName || String(service.port)
  }`;
  return `${kind}-${hash16(base + suffix).slice(0, 8)}-${base}${suffix}`;
}

/**
 * kube-proxy's nftables tables (`ip kube-proxy` with the services, an empty
 * `ip6 kube-proxy` skeleton) as one `nft -f` input.
 */
export function renderKubeProxyNftables(plan: Plan): string {
  const pods = clusterCIDR(plan);
  const lines: string[] = [];
  for (const family of ["ip", "ip6"] as const) {
    const addr = family === "ip" ? "ipv4_addr" : "ipv6_addr";
    const t = `${family} kube-proxy`;
    lines.push(
      `add table ${t} { comment "rules for kube-proxy" ; }`,
      `add set ${t} cluster-ips { type ${addr} ; comment "Active ClusterIPs" ; }`,
      `add set ${t} nodeport-ips { type ${addr} ; comment "IPs that accept NodePort traffic" ; }`,
      `add map ${t} firewall-ips { type ${addr} . inet_proto . inet_service : verdict ; comment "destinations that are subject to LoadBalancerSourceRanges" ; }`,
      `add map ${t} no-endpoint-nodeports { type inet_proto . inet_service : verdict ; comment "vmap to drop or reject packets to service nodeports with no endpoints" ; }`,
      `add map ${t} no-endpoint-services { type ${addr} . inet_proto . inet_service : verdict ; comment "vmap to drop or reject packets to services with no endpoints" ; }`,
      `add map ${t} service-ips { type ${addr} . inet_proto . inet_service : verdict ; comment "ClusterIP, ExternalIP and LoadBalancer IP traffic" ; }`,
      `add map ${t} service-nodeports { type inet_proto . inet_service : verdict ; comment "NodePort traffic" ; }`,
      `add chain ${t} cluster-ips-check`,
      `add chain ${t} filter-prerouting-pre-dnat { type filter hook prerouting priority -110 ; }`,
      `add chain ${t} filter-output-pre-dnat { type filter hook output priority -110 ; }`,
      `add chain ${t} filter-forward { type filter hook forward priority 0 ; }`,
      `add chain ${t} filter-input { type filter hook input priority 0 ; }`,
      `add chain ${t} filter-output { type filter hook output priority 0 ; }`,
      `add chain ${t} firewall-check`,
      `add chain ${t} mark-for-masquerade`,
      `add chain ${t} masquerading`,
      `add chain ${t} nat-output { type nat hook output priority -100 ; }`,
      `add chain ${t} nat-postrouting { type nat hook postrouting priority 100 ; }`,
      `add chain ${t} nat-prerouting { type nat hook prerouting priority -100 ; }`,
      `add chain ${t} nodeport-endpoints-check`,
      `add chain ${t} reject-chain { comment "helper for @no-endpoint-services / @no-endpoint-nodeports" ; }`,
      `add chain ${t} services`,
      `add chain ${t} service-endpoints-check`,
      `add rule ${t} cluster-ips-check ${family} daddr @cluster-ips reject comment "Reject traffic to invalid ports of ClusterIPs"`,
      `add rule ${t} filter-prerouting-pre-dnat ct state new jump firewall-check`,
      `add rule ${t} filter-forward ct state new jump service-endpoints-check`,
      `add rule ${t} filter-forward ct state new jump cluster-ips-check`,
      `add rule ${t} filter-input ct state new jump nodeport-endpoints-check`,
      `add rule ${t} filter-input ct state new jump service-endpoints-check`,
      `add rule ${t} filter-output ct state new jump service-endpoints-check`,
      `add rule ${t} filter-output-pre-dnat ct state new jump firewall-check`,
      `add rule ${t} filter-output ct state new jump cluster-ips-check`,
      `add rule ${t} firewall-check ${family} daddr . meta l4proto . th dport vmap @firewall-ips`,
      `add rule ${t} mark-for-masquerade mark set mark or ${MARK}`,
      `add rule ${t} masquerading mark and ${MARK} == 0 return`,
      `add rule ${t} masquerading mark set mark xor ${MARK}`,
      `add rule ${t} masquerading masquerade fully-random`,
      `add rule ${t} nat-output jump services`,
      `add rule ${t} nat-postrouting jump masquerading`,
      `add rule ${t} nat-prerouting jump services`,
      `add rule ${t} nodeport-endpoints-check ${family} daddr @nodeport-ips meta l4proto . th dport vmap @no-endpoint-nodeports`,
      `add rule ${t} reject-chain reject`,
      `add rule ${t} services ${family} daddr . meta l4proto . th dport vmap @service-ips`,
      `add rule ${t} services ${family} daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports`,
      `add rule ${t} service-endpoints-check ${family} daddr . meta l4proto . th dport vmap @no-endpoint-services`,
    );
  }
  const t = "ip kube-proxy";
  for (const cidr of plan.serviceCIDRs) {
    lines.push(
      `add rule ${t} cluster-ips-check ip daddr { ${cidr} } drop comment "Drop traffic to unallocated ClusterIPs"`,
    );
  }
  for (const ip of plan.nodePortAddresses) lines.push(`add element ${t} nodeport-ips { ${ip} }`);
  for (const service of plan.services) {
    const clusterIP = service.clusterIPs[0]!;
    const proto = service.protocol.toLowerCase();
    const key = (ip: string) => `${ip} . ${proto} . ${service.port}`;
    const endpoints = service.internal.endpoints;
    lines.push(`add element ${t} cluster-ips { ${clusterIP} }`);
    if (endpoints.length === 0) {
      lines.push(`add element ${t} no-endpoint-services { ${key(clusterIP)} : goto reject-chain }`);
      continue;
    }
    const chain = nftName("service", service);
    const external = nftName("external", service);
    const endpointChains = endpoints.map((endpoint) =>
      nftName("endpoint", service, `__${endpoint.ip}/${endpoint.port}`)
    );
    endpoints.forEach((endpoint, i) => {
      const name = endpointChains[i]!;
      lines.push(
        `add chain ${t} ${name}`,
        `add rule ${t} ${name} ip saddr ${endpoint.ip} jump mark-for-masquerade`,
        `add rule ${t} ${name} meta l4proto ${proto} dnat to ${endpoint.ip}:${endpoint.port}`,
      );
    });
    lines.push(
      `add chain ${t} ${chain}`,
      `add rule ${t} ${chain} ip daddr ${clusterIP} ip saddr != ${pods} jump mark-for-masquerade`,
      `add rule ${t} ${chain} numgen random mod ${endpoints.length} vmap { ${
        endpointChains.map((name, i) => `${i} : goto ${name}`).join(" , ")
      } }`,
      `add element ${t} service-ips { ${key(clusterIP)} : goto ${chain} }`,
      `add chain ${t} ${external}`,
      `add rule ${t} ${external} jump mark-for-masquerade`,
      `add rule ${t} ${external} goto ${chain}`,
    );
    if (service.nodePort !== 0) {
      lines.push(
        `add element ${t} service-nodeports { ${proto} . ${service.nodePort} : goto ${external} }`,
      );
    }
    for (const ip of [...service.externalIPs, ...service.loadBalancerIPs]) {
      lines.push(`add element ${t} service-ips { ${key(ip)} : goto ${external} }`);
    }
    if (service.sourceRanges.length > 0) {
      const firewall = nftName("firewall", service);
      lines.push(
        `add chain ${t} ${firewall}`,
        `add rule ${t} ${firewall} ip saddr != { ${service.sourceRanges.join(", ")} } drop`,
        ...service.loadBalancerIPs.map((ip) =>
          `add element ${t} firewall-ips { ${key(ip)} : goto ${firewall} }`
        ),
      );
    }
  }
  return lines.join("\n") + "\n";
}

/**
 * kube-proxy's iptables rules (with kubelet's chains) as `iptables-restore
 * --noflush` input for IPv4, built-in chains' jumps included. Load
 * {@linkcode KUBE_PROXY_NFACCT} first.
 */
export function renderKubeProxyIptables(plan: Plan): string {
  const pods = clusterCIDR(plan);
  const c = (text: string) => `-m comment --comment "${text}"`;
  const filter: string[] = [
    "*filter",
    ...[
      "KUBE-EXTERNAL-SERVICES",
      "KUBE-FIREWALL",
      "KUBE-FORWARD",
      "KUBE-KUBELET-CANARY",
      "KUBE-NODEPORTS",
      "KUBE-PROXY-CANARY",
      "KUBE-PROXY-FIREWALL",
      "KUBE-SERVICES",
    ].map((chain) => `:${chain} - [0:0]`),
    `-A INPUT -m conntrack --ctstate NEW ${
      c("kubernetes load balancer firewall")
    } -j KUBE-PROXY-FIREWALL`,
    `-A INPUT ${c("kubernetes health check service ports")} -j KUBE-NODEPORTS`,
    `-A INPUT -m conntrack --ctstate NEW ${
      c("kubernetes externally-visible service portals")
    } -j KUBE-EXTERNAL-SERVICES`,
    "-A INPUT -j KUBE-FIREWALL",
    `-A FORWARD -m conntrack --ctstate NEW ${
      c("kubernetes load balancer firewall")
    } -j KUBE-PROXY-FIREWALL`,
    `-A FORWARD ${c("kubernetes forwarding rules")} -j KUBE-FORWARD`,
    `-A FORWARD -m conntrack --ctstate NEW ${c("kubernetes service portals")} -j KUBE-SERVICES`,
    `-A FORWARD -m conntrack --ctstate NEW ${
      c("kubernetes externally-visible service portals")
    } -j KUBE-EXTERNAL-SERVICES`,
    `-A OUTPUT -m conntrack --ctstate NEW ${
      c("kubernetes load balancer firewall")
    } -j KUBE-PROXY-FIREWALL`,
    `-A OUTPUT -m conntrack --ctstate NEW ${c("kubernetes service portals")} -j KUBE-SERVICES`,
    "-A OUTPUT -j KUBE-FIREWALL",
    `-A KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 ${
      c("block incoming localnet connections")
    } -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP`,
    "-A KUBE-FORWARD -m conntrack --ctstate INVALID -m nfacct --nfacct-name ct_state_invalid_dropped_pkts -j DROP",
    `-A KUBE-FORWARD ${c("kubernetes forwarding rules")} -m mark --mark ${MARK}/${MARK} -j ACCEPT`,
    `-A KUBE-FORWARD ${
      c("kubernetes forwarding conntrack rule")
    } -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT`,
  ];
  const natChains = new Set([
    "KUBE-KUBELET-CANARY",
    "KUBE-MARK-MASQ",
    "KUBE-NODEPORTS",
    "KUBE-POSTROUTING",
    "KUBE-PROXY-CANARY",
    "KUBE-SERVICES",
  ]);
  const nat: string[] = [
    `-A PREROUTING ${c("kubernetes service portals")} -j KUBE-SERVICES`,
    `-A OUTPUT ${c("kubernetes service portals")} -j KUBE-SERVICES`,
    `-A POSTROUTING ${c("kubernetes postrouting rules")} -j KUBE-POSTROUTING`,
    `-A KUBE-MARK-MASQ -j MARK --or-mark ${MARK}`,
    `-A KUBE-POSTROUTING -m mark ! --mark ${MARK}/${MARK} -j RETURN`,
    `-A KUBE-POSTROUTING -j MARK --xor-mark ${MARK}`,
    `-A KUBE-POSTROUTING ${
      c("kubernetes service traffic requiring SNAT")
    } -j MASQUERADE --random-fully`,
  ];
  for (const service of plan.services) {
    const name = `${service.namespace}/${service.name}${
      service.portName ? `:${service.portName}` : ""
    }`;
    const clusterIP = service.clusterIPs[0]!;
    const proto = service.protocol.toLowerCase();
    const match = (ip: string) => `-d ${ip}/32 -p ${proto}`;
    const port = `-m ${proto} --dport ${service.port}`;
    const endpoints = service.internal.endpoints;
    if (endpoints.length === 0) {
      filter.push(
        `-A KUBE-SERVICES ${match(clusterIP)} ${
          c(`${name} has no endpoints`)
        } ${port} -j REJECT --reject-with icmp-port-unreachable`,
      );
      continue;
    }
    const chains = serviceChainNames(service);
    for (const chain of [chains.cluster, chains.external]) natChains.add(chain);
    nat.push(
      `-A KUBE-SERVICES ${match(clusterIP)} ${
        c(`${name} cluster IP`)
      } ${port} -j ${chains.cluster}`,
      `-A ${chains.cluster} ! -s ${pods} ${match(clusterIP)} ${
        c(`${name} cluster IP`)
      } ${port} -j KUBE-MARK-MASQ`,
      `-A ${chains.external} ${
        c(`masquerade traffic for ${name} external destinations`)
      } -j KUBE-MARK-MASQ`,
      `-A ${chains.external} -j ${chains.cluster}`,
    );
    endpoints.forEach((endpoint, i) => {
      const sep = endpointChainName(service, endpoint);
      natChains.add(sep);
      const left = endpoints.length - i;
      const pick = left > 1
        ? ` -m statistic --mode random --probability ${(1 / left).toFixed(10)}`
        : "";
      nat.push(
        `-A ${chains.cluster} ${c(`${name} -> ${endpointString(endpoint)}`)}${pick} -j ${sep}`,
        `-A ${sep} -s ${endpoint.ip}/32 ${c(name)} -j KUBE-MARK-MASQ`,
        `-A ${sep} -p ${proto} ${c(name)} -m ${proto} -j DNAT --to-destination ${
          endpointString(endpoint)
        }`,
      );
    });
    if (service.nodePort !== 0) {
      nat.push(
        `-A KUBE-NODEPORTS -d 127.0.0.0/8 -p ${proto} ${
          c(name)
        } -m ${proto} --dport ${service.nodePort} -m nfacct --nfacct-name localhost_nps_accepted_pkts -j ${chains.external}`,
        `-A KUBE-NODEPORTS -p ${proto} ${
          c(name)
        } -m ${proto} --dport ${service.nodePort} -j ${chains.external}`,
      );
    }
    for (const ip of service.externalIPs) {
      nat.push(
        `-A KUBE-SERVICES ${match(ip)} ${c(`${name} external IP`)} ${port} -j ${chains.external}`,
      );
    }
    for (const ip of service.loadBalancerIPs) {
      const firewalled = service.sourceRanges.length > 0;
      nat.push(
        `-A KUBE-SERVICES ${match(ip)} ${c(`${name} loadbalancer IP`)} ${port} -j ${
          firewalled ? chains.firewall : chains.external
        }`,
      );
      if (!firewalled) continue;
      natChains.add(chains.firewall);
      for (const range of service.sourceRanges) {
        nat.push(
          `-A ${chains.firewall} -s ${range} ${c(`${name} loadbalancer IP`)} -j ${chains.external}`,
        );
      }
      nat.push(
        `-A ${chains.firewall} ${
          c(`other traffic to ${name} will be dropped by KUBE-PROXY-FIREWALL`)
        }`,
      );
      filter.push(
        `-A KUBE-PROXY-FIREWALL ${match(ip)} ${
          c(`${name} traffic not accepted by ${chains.firewall}`)
        } ${port} -j DROP`,
      );
    }
  }
  nat.push(
    `-A KUBE-SERVICES ${
      c("kubernetes service nodeports; NOTE: this must be the last rule in this chain")
    } -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS`,
  );
  return [
    "*mangle",
    ":KUBE-IPTABLES-HINT - [0:0]",
    ":KUBE-KUBELET-CANARY - [0:0]",
    ":KUBE-PROXY-CANARY - [0:0]",
    "COMMIT",
    ...filter,
    "COMMIT",
    "*nat",
    ...[...natChains].sort().map((chain) => `:${chain} - [0:0]`),
    ...nat,
    "COMMIT",
    "",
  ].join("\n");
}
