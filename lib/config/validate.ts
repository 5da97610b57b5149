/**
 * Cross-field validation of a Config, with errors that name the flag or file
 * field that set the value at fault.
 *
 * @module
 */

import type { Config } from "./types.ts";
import { ipFamily } from "../core/ip.ts";
import { flagLabel } from "./flags.ts";
import { ConfigError, formatDuration, type Origins } from "./values.ts";
import { modeOf } from "../../backends/registry.ts";

export function validate(config: Config, origins: Origins): void {
  const label = (key: string, flag: string) => origins.get(key) ?? flagLabel(flag);
  const invalid = (field: string, detail: string) => {
    throw new ConfigError(field, `Invalid ${field}: ${detail}`);
  };

  if (config.hostnameOverride === "") {
    invalid("--hostname-override", "the host name is empty; set --hostname-override");
  }
  const families = config.clusterCIDRs.map(ipFamily);
  if (families.length > 2 || (families.length === 2 && families[0] === families[1])) {
    invalid(
      label("clusterCIDRs", "cluster-cidr"),
      "want one CIDR, or two of different IP families for dual-stack",
    );
  }
  if (config.detectLocalMode === "BridgeInterface" && config.bridgeInterface === "") {
    invalid(
      label("bridgeInterface", "pod-bridge-interface"),
      "required when the detect-local mode is BridgeInterface",
    );
  }
  if (config.detectLocalMode === "InterfaceNamePrefix" && config.interfaceNamePrefix === "") {
    invalid(
      label("interfaceNamePrefix", "pod-interface-name-prefix"),
      "required when the detect-local mode is InterfaceNamePrefix",
    );
  }
  const section = modeOf(config.proxyMode).syncPeriods;
  const periods = config[section];
  if (periods.syncPeriodMs <= 0) {
    invalid(label(`${section}.syncPeriodMs`, `${section}-sync-period`), "must be greater than 0");
  }
  if (periods.minSyncPeriodMs > periods.syncPeriodMs) {
    invalid(
      label(`${section}.minSyncPeriodMs`, `${section}-min-sync-period`),
      `${formatDuration(periods.minSyncPeriodMs)} exceeds the sync period ${
        formatDuration(periods.syncPeriodMs)
      }`,
    );
  }
  if (config.winkernel.enableDSR && !config.featureGates.WinDSR) {
    invalid(label("winkernel.enableDSR", "enable-dsr"), "needs the WinDSR feature gate");
  }
}
