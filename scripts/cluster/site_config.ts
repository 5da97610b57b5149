/**
 * The shipped `scripts/deploy/configmap.yaml` with the values an operator fills in for this
 * cluster, printed as YAML for `kubectl apply -f -`: the apiserver endpoint in the kubeconfig,
 * the pod CIDR, and (with `--conntrack-readonly`) conntrack limits left alone, since conntrack
 * sysctls are read-only in a node that is a network namespace. Every other value is as shipped.
 * With `--config-only` it prints only the KubeProxyConfiguration, with `--hostname-override` and
 * `--kubeconfig` set in it: what kube-proxy gets in the comparison run, so that both proxies run
 * the same configuration.
 *
 * ```sh
 * deno run --allow-read scripts/cluster/site_config.ts scripts/deploy/configmap.yaml \
 *   --apiserver https://192.168.234.1:7443 --cluster-cidr 10.244.0.0/16 --conntrack-readonly
 * ```
 *
 * @module
 */

import { parseArgs } from "node:util";
import { parse, parseAllDocuments, stringify } from "yaml";

/** What this cluster needs changed in the shipped ConfigMap. */
export interface SiteValues {
  apiserver: string;
  clusterCIDR: string;
  conntrackReadOnly: boolean;
}

/** The shipped ConfigMap document with the site's values filled in. */
export function siteConfigMap(configMap: any, site: SiteValues): any {
  const data = { ...configMap.data };
  const config = parse(data["config.yaml"]);
  config.clusterCIDR = site.clusterCIDR;
  if (site.conntrackReadOnly) {
    config.conntrack = {
      ...config.conntrack,
      maxPerCore: 0,
      min: 0,
      tcpEstablishedTimeout: "0s",
      tcpCloseWaitTimeout: "0s",
    };
  }
  data["config.yaml"] = stringify(config);
  const kubeconfigKey = Object.keys(data).find((key) => /kubeconfig/i.test(key));
  if (kubeconfigKey === undefined) {
    throw new TypeError("Cannot fill in the apiserver: the ConfigMap has no kubeconfig key");
  }
  const kubeconfig = parse(data[kubeconfigKey]);
  for (const cluster of kubeconfig.clusters ?? []) cluster.cluster.server = site.apiserver;
  data[kubeconfigKey] = stringify(kubeconfig);
  return { ...configMap, data };
}

if (import.meta.main) {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: {
      apiserver: { type: "string" },
      "cluster-cidr": { type: "string" },
      "conntrack-readonly": { type: "boolean", default: false },
      "config-only": { type: "boolean", default: false },
      "hostname-override": { type: "string" },
      kubeconfig: { type: "string" },
    },
  });
  const [file] = positionals;
  if (!file || !values.apiserver || !values["cluster-cidr"]) {
    console.error(
      "usage: site_config.ts CONFIGMAP.yaml --apiserver URL --cluster-cidr CIDR [--conntrack-readonly] [--config-only]",
    );
    Deno.exit(2);
  }
  const documents = parseAllDocuments(await Deno.readTextFile(file)).map((d) => d.toJSON());
  const configMap = documents.find((d) => d?.kind === "ConfigMap");
  const filled = siteConfigMap(configMap, {
    apiserver: values.apiserver,
    clusterCIDR: values["cluster-cidr"],
    conntrackReadOnly: values["conntrack-readonly"]!,
  });
  if (values["config-only"]) {
    const config = parse(filled.data["config.yaml"]);
    if (values["hostname-override"]) config.hostnameOverride = values["hostname-override"];
    if (values.kubeconfig) {
      config.clientConnection = { ...config.clientConnection, kubeconfig: values.kubeconfig };
    }
    console.log(stringify(config));
  } else {
    console.log(stringify(filled));
  }
}
