/**
 * Chooses between the nft and legacy iptables binaries the way kube-proxy's
 * iptables wrapper does: the variant whose tables already hold kubelet's hint
 * chains wins, else the one holding more rules, nft on a tie.
 *
 * @module
 */

import type { IpFamily } from "../../lib/core/model.ts";
import type { Executor } from "../../lib/core/executor.ts";

/** Which netfilter backend the iptables binaries talk to. */
export type IptablesVariant = "nft" | "legacy";

/** The programs of one variant and family. */
export interface IptablesPrograms {
  /** `iptables-nft-restore`, `ip6tables-legacy-restore`, ... */
  restore: string;
  save: string;
  /** The rule command for `-C`/`-I`/`-L`. */
  iptables: string;
}

/** Names the programs of a variant for a family. */
export function iptablesPrograms(variant: IptablesVariant, family: IpFamily): IptablesPrograms {
  const base = family === "IPv4" ? "iptables" : "ip6tables";
  return {
    restore: `${base}-${variant}-restore`,
    save: `${base}-${variant}-save`,
    iptables: `${base}-${variant}`,
  };
}

/** What one variant's `*-save` output shows. */
export interface SavedRulesSummary {
  /** The binaries ran. */
  available: boolean;
  /** Number of rule lines (`-A ...`). */
  rules: number;
  /** A kubelet/kube-proxy hint chain is present (KUBE-IPTABLES-HINT or KUBE-KUBELET-CANARY). */
  hinted: boolean;
}

/** Summarises `iptables-save` output (both families concatenated is fine). */
export function summarizeSave(save: string): Omit<SavedRulesSummary, "available"> {
  let rules = 0;
  let hinted = false;
  for (const line of save.split("\n")) {
    if (line.startsWith("-")) rules++;
    else if (/^:(KUBE-IPTABLES-HINT|KUBE-KUBELET-CANARY) /.test(line)) hinted = true;
  }
  return { rules, hinted };
}

/** Picks the variant from both summaries (pure). */
export function chooseVariant(nft: SavedRulesSummary, legacy: SavedRulesSummary): IptablesVariant {
  if (!legacy.available) return "nft";
  if (!nft.available) return "legacy";
  if (nft.hinted !== legacy.hinted) return nft.hinted ? "nft" : "legacy";
  return legacy.rules > nft.rules ? "legacy" : "nft";
}

async function summarize(executor: Executor, variant: IptablesVariant): Promise<SavedRulesSummary> {
  let output = "";
  let available = false;
  for (const family of ["IPv4", "IPv6"] as const) {
    try {
      const result = await executor.run({
        program: iptablesPrograms(variant, family).save,
        args: [],
      });
      if (result.code === 0) {
        available = true;
        output += result.stdout;
      }
    } catch {
      // Missing binary: this variant is not installed.
    }
  }
  return { available, ...summarizeSave(output) };
}

/**
 * Resolves `config.iptables.backend`: "nft" and "legacy" are taken as given,
 * "auto" runs both variants' save programs and picks with {@linkcode chooseVariant}.
 */
export async function detectVariant(
  executor: Executor,
  preference: "auto" | IptablesVariant,
): Promise<IptablesVariant> {
  if (preference !== "auto") return preference;
  const [nft, legacy] = [await summarize(executor, "nft"), await summarize(executor, "legacy")];
  return chooseVariant(nft, legacy);
}
