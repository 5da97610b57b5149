/**
 * What `kproxy explain` answers, and what it derives once per call.
 *
 * @module
 */

import type { IpFamily, Protocol } from "../../core/model.ts";
import type { NodePlans } from "../../core/plan.ts";
import type { PlannerOptions } from "../../core/planner.ts";
import type { ClusterState } from "../../core/state.ts";

/** Input of {@linkcode explain}. */
export interface ExplainInput {
  state: ClusterState;
  /** The plans of `options.nodeName` for `state` (replanned when `node` differs). */
  plans: NodePlans;
  options: PlannerOptions;
  /** The DEST argument, see {@linkcode parseDestination}. */
  destination: string;
  /** The client's source address; "" or undefined when unknown. */
  from?: string;
  /** The node the packet enters on. @default {options.nodeName} */
  node?: string;
}

/** How an address belongs to a service port. */
export type AddressKind = "cluster IP" | "node port" | "external IP" | "load-balancer IP";

/** One endpoint of the service and whether this packet may go to it. */
export interface EndpointVerdict {
  ip: string;
  /** Target port; 0 when the endpoint's slice has no port for this service port. */
  port: number;
  nodeName: string;
  zone: string;
  /** Runs on the explaining node. */
  local: boolean;
  ready: boolean;
  serving: boolean;
  terminating: boolean;
  /** The EndpointSlice it came from. */
  slice: string;
  eligible: boolean;
  /** Why it is (or is not) eligible. */
  reason: string;
}

/** A yes/no answer that may depend on something the explanation cannot see. */
export type Answer = "yes" | "no" | "depends";

/** Which service port DEST is and what happens to the packet there. */
export interface ServicePortMatch {
  /** `namespace/name:portName/protocol`. */
  id: string;
  service: string;
  portName: string;
  kind: AddressKind;
  /** Which traffic plan applies: cluster IP traffic, or external traffic. */
  traffic: "internal" | "external";
  /** The traffic policy that governs `traffic`. */
  policy: string;
  /** The planner's reason for the chosen endpoints. */
  planReason: string;
  endpoints: EndpointVerdict[];
  eligibleCount: number;
  /** What happens when no endpoint is eligible; undefined when some is. */
  whenEmpty?: { verdict: "reject" | "drop"; text: string };
  masquerade: { answer: Answer; reason: string };
  affinity: { timeoutSeconds: number; text: string };
  sourceRanges: {
    ranges: string[];
    answer: "allowed" | "dropped" | "depends" | "any";
    text: string;
  };
  healthCheckNodePort: number;
}

/** The answer of {@linkcode explain}. */
export interface Explanation {
  /** DEST as given. */
  input: string;
  /** The address the packet is sent to. */
  ip: string;
  port: number;
  protocol: Protocol;
  family: IpFamily;
  /** The node the packet enters on. */
  node: string;
  /** The source address, "" when not given. */
  from: string;
  /** The service port DEST belongs to, undefined when it is no service address. */
  match?: ServicePortMatch;
  /** One line: what happens to the packet. */
  outcome: string;
  /** Extra remarks (why an address is no service address, hairpin, ...). */
  notes: string[];
}

/** What {@linkcode explain} derives once per call. */
export interface Context {
  state: ClusterState;
  options: PlannerOptions;
  plans: NodePlans;
  nodeName: string;
  nodeLabels: Readonly<Record<string, string>>;
  /** The node's own addresses (Node object, plus interface addresses for this node). */
  nodeAddresses: string[];
  from: string;
}
