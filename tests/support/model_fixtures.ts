/**
 * Model objects for tests: a ClusterIP Service with kube-proxy's defaults,
 * overridable field by field.
 *
 * @module
 */

import type { Service } from "../../lib/core/model.ts";

/** A ClusterIP Service `default/<name>` on 10.96.0.10, port 80/TCP → 8080, unless overridden. */
export function modelService(spec: Partial<Service> & { name: string }): Service {
  return {
    namespace: "default",
    type: "ClusterIP",
    clusterIPs: ["10.96.0.10"],
    ports: [{ name: "", protocol: "TCP", port: 80, targetPort: 8080, nodePort: 0 }],
    externalIPs: [],
    loadBalancerIngress: [],
    loadBalancerSourceRanges: [],
    affinityTimeoutSeconds: 0,
    internalTrafficPolicy: "Cluster",
    externalTrafficPolicy: "Cluster",
    healthCheckNodePort: 0,
    trafficDistribution: "",
    topologyKeys: [],
    topologyMode: "",
    ...spec,
  };
}
