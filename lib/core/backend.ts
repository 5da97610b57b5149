/**
 * The contract between the sync runner and a proxy mode.
 *
 * A backend renders a {@linkcode Plan} into its own syntax (pure) and applies it
 * through the {@linkcode Executor}. It never decides policy.
 *
 * @module
 */

import type { Command } from "./executor.ts";
import type { Plan } from "./plan.ts";
import type { IpFamily } from "./model.ts";
import type { ServiceCounterSample } from "./service_counters.ts";

/** What the runner hands a backend on each sync. */
export interface SyncRequest {
  /** The plans to program, one per enabled IP family. */
  plans: Plan[];
  /**
   * Ids of service ports whose plan may differ from the plans last applied
   * (see `ServicePortPlan.id`). Each backend keeps its own record of what it
   * applied, so a partial sync diffs against what it wrote itself.
   */
  changed: Set<string>;
  /** True at start, after a failure, on drift and once per syncPeriod: rewrite everything. */
  full: boolean;
}

/** The outcome of one sync, for logs and metrics. */
export interface SyncResult {
  /** True when the backend rewrote everything (it may upgrade a partial request). */
  full: boolean;
  /** Short human summary, e.g. "3 services, 1 script, 412 lines". */
  summary?: string;
  /** iptables mode: rules per family and table, for kube-proxy's rule count metrics. */
  iptablesRules?: IptablesRuleCount[];
}

/** The iptables tables kube-proxy counts rules in. */
export const IPTABLES_COUNTED_TABLES = ["filter", "nat"] as const;

/** Rules of one iptables table of one family (`kubeproxy_sync_proxy_rules_iptables_*`). */
export interface IptablesRuleCount {
  family: IpFamily;
  table: (typeof IPTABLES_COUNTED_TABLES)[number];
  /** Rules written by this sync. */
  written: number;
  /** Rules in the table's chains kproxy owns, after this sync. */
  total: number;
}

/**
 * Thrown by {@linkcode Backend.preflight} when the node cannot run the mode:
 * kproxy exits with status 1 and this one-line message.
 */
export class ModeUnavailableError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ModeUnavailableError";
  }
}

/**
 * Thrown by {@linkcode Backend.preflight} when the mode can run but cannot
 * count Service traffic (a program it counts with is missing): kproxy warns
 * once and runs on as with `--service-counters=false`.
 */
export class CountersUnavailableError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "CountersUnavailableError";
  }
}

/** What {@linkcode Backend.cleanup} leaves in place. */
export interface CleanupOptions {
  /**
   * iptables chains the running mode uses (iptables and ipvs share names):
   * kept, with the jumps to them. @default none
   */
  keepChains?: (table: string, chain: string) => boolean;
  /**
   * Takes work that may end after `cleanup` returns: deleting the iptables
   * mode's counters, which no other mode uses, one `nfacct` process each (10k
   * Services: tens of seconds). By default `cleanup` waits for it.
   */
  defer?: (work: Promise<void>) => void;
}

/** A proxy mode: nftables, iptables, ipvs or kernelspace. */
export interface Backend {
  /** The `--proxy-mode` value. */
  readonly mode: string;
  /** Applies a sync; throws (leaving the previous rules in place) when it fails. */
  sync(request: SyncRequest): Promise<SyncResult>;
  /** Cheap check that the kernel still holds what was applied; true when it drifted. */
  checkDrift?(): Promise<boolean>;
  /**
   * Checks once, before anything is served, that this mode can run on this
   * node; throws an error with a one-line message naming what is missing.
   */
  preflight?(): Promise<void>;
  /**
   * Starts what the first sync needs and the Services do not (kernel objects
   * of the mode's own), while the initial lists run; never rejects: what
   * failed is left to the first sync, which waits for the warm-up to end.
   */
  warmUp?(): Promise<void>;
  /**
   * Removes what this mode installed, as kproxy or as kube-proxy ran it, and
   * nothing else: never a whole table or IPVS state it did not create.
   */
  cleanup(options?: CleanupOptions): Promise<void>;
  /**
   * Reads the per-Service-port counters (`Plan.serviceCounters`) of `plans`,
   * by default the last applied ones, in one kernel read; absent in modes
   * that keep none.
   */
  readServiceCounters?(plans?: readonly Plan[]): Promise<ServiceCounterSample[]>;
  /** For `kproxy diff`: how to load these plans in full, and how to list what is loaded. */
  inspect?(plans: Plan[]): KernelInspection;
}

/** A kernel listing: each block (chain, set, map) with its normalised lines. */
export type Listing = Map<string, Set<string>>;

/** How `kproxy diff` loads, lists and reads a mode's rules. */
export interface KernelInspection {
  /** Loads the full desired state into an empty network namespace. */
  load: Command[];
  /** Lists the mode's rules; a failing command lists nothing (e.g. no table yet). */
  list: Command[];
  /** Reads the output of `list` into blocks of normalised lines. */
  parse(text: string): Listing;
  /** The service (`namespace/name`) a block name or a listed line concerns, if any. */
  serviceOf(text: string): string | undefined;
}
