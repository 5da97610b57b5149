/**
 * kubeadm's KubeProxyConfiguration, read as kube-proxy 1.36 reads it. The
 * fixture, tests/data/kubeadm_kube_proxy_1.36.yaml, is built from kubeadm's
 * componentconfigs/kubeproxy.go; replace it with a real `kubeadm config print
 * init-defaults --component-configs KubeProxyConfiguration` output when one is at hand.
 */
import assert from "node:assert/strict";
import { parseCommandLine } from "../../lib/config/command_line.ts";
import { effectiveSyncPeriods } from "../../lib/config/defaults.ts";
import { conntrackSysctls } from "../../lib/core/conntrack_sysctls.ts";

const FIXTURE = new URL("../data/kubeadm_kube_proxy_1.36.yaml", import.meta.url);

function kubeadmConfig(): string {
  return Deno.readTextFileSync(FIXTURE);
}

function parse(text: string, argv: string[] = []) {
  return parseCommandLine(["--config=/var/lib/kube-proxy/config.conf", ...argv], {
    readTextFile: () => text,
    hostname: () => "node-a",
  });
}

Deno.test("kubeadm's KubeProxyConfiguration means what it means to kube-proxy 1.36", () => {
  const { config, warnings } = parse(kubeadmConfig(), ["--hostname-override=node-a"]);
  assert.equal(config.proxyMode, "iptables", 'mode "" is iptables on Linux');
  assert.deepEqual(config.nodePortAddresses, [], "null: all local IPs in the iptables mode");
  assert.deepEqual(effectiveSyncPeriods(config), { syncPeriodMs: 30_000, minSyncPeriodMs: 1_000 });
  assert.deepEqual(config.conntrack, {
    maxPerCore: 32768,
    min: 131072,
    tcpEstablishedTimeoutMs: 86_400_000,
    tcpCloseWaitTimeoutMs: 3_600_000,
    tcpBeLiberal: false,
    udpTimeoutMs: 0,
    udpStreamTimeoutMs: 0,
  });
  assert.deepEqual(conntrackSysctls(config.conntrack, 4).map((s) => `${s.key}=${s.value}`), [
    "net.netfilter.nf_conntrack_max=131072",
    "net.netfilter.nf_conntrack_buckets=32768",
    "net.netfilter.nf_conntrack_tcp_timeout_established=86400",
    "net.netfilter.nf_conntrack_tcp_timeout_close_wait=3600",
  ]);
  assert.equal(config.oomScoreAdj, -999);
  assert.equal(config.bindAddress, "0.0.0.0");
  assert.equal(config.healthzBindAddress, "0.0.0.0:10256");
  assert.equal(config.metricsBindAddress, "127.0.0.1:10249");
  assert.deepEqual(config.clusterCIDRs, ["10.244.0.0/16"]);
  assert.equal(config.detectLocalMode, "ClusterCIDR");
  assert.equal(config.kubeconfig, "/var/lib/kube-proxy/kubeconfig.conf");
  assert.equal(config.iptables.masqueradeBit, 14);
  assert.equal(config.iptables.localhostNodePorts, false, "kproxy's difference (CVE-2020-8558)");
  assert.equal(config.masqueradeAll, false);
  assert.equal(config.hostnameOverride, "node-a");
  assert.deepEqual(warnings, [], "kubeadm's zero values are defaults, not settings to warn about");
});

Deno.test("kubeadm on an IPv6 control plane: bindAddress :: moves the servers' defaults to IPv6", () => {
  const text = kubeadmConfig().replace(/^bindAddress: 0\.0\.0\.0$/m, 'bindAddress: "::"');
  const { config } = parse(text);
  assert.equal(config.bindAddress, "::");
  assert.equal(config.healthzBindAddress, "[::]:10256");
  assert.equal(config.metricsBindAddress, "[::1]:10249");
});

Deno.test("healthzBindAddress and metricsBindAddress without a port take kube-proxy's ports", () => {
  const text = kubeadmConfig()
    .replace(/^healthzBindAddress: ""$/m, "healthzBindAddress: 0.0.0.0")
    .replace(/^metricsBindAddress: ""$/m, "metricsBindAddress: 127.0.0.1");
  const { config } = parse(text);
  assert.equal(config.healthzBindAddress, "0.0.0.0:10256");
  assert.equal(config.metricsBindAddress, "127.0.0.1:10249");
});
