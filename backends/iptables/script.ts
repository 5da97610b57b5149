/**
 * An `iptables-restore` input under construction: per table, the chains it
 * declares (which `--noflush` creates or flushes), the rules it appends and
 * the chains it deletes. Like a knftables Transaction, every call validates
 * and queues; the first error is kept, `toString()` shows it, and the backend
 * refuses to run a script that has one.
 *
 * @module
 */

import type { IpFamily } from "../../lib/core/model.ts";
import type { IptablesTable } from "./chains.ts";
import { MAX_CHAIN_NAME_LENGTH } from "./names.ts";

const TABLE_ORDER: readonly IptablesTable[] = ["mangle", "filter", "nat"];
const CHAIN_NAME = /^[A-Za-z0-9_][A-Za-z0-9_.-]*$/;
const SAFE_ARG = /^[A-Za-z0-9_.:/,!+\-[\]]+$/;
const QUOTABLE_ARG = /^[A-Za-z0-9_.:/,!+\-[\] ;>()]*$/;

interface TableContent {
  chains: string[];
  /** Chains rules may be appended to: declared here, or kept as the kernel has them. */
  declared: Set<string>;
  rules: string[];
  /** Rules appended (`-A`) per chain. */
  appended: Map<string, number>;
  deleted: string[];
}

/** One `iptables-restore` (or `ip6tables-restore`) input for one IP family. */
export class IptablesRestoreScript {
  /** The family whose restore program must read this script. */
  readonly family: IpFamily;
  readonly #tables = new Map<IptablesTable, TableContent>();
  #error?: TypeError;
  #ruleCount = 0;

  constructor(family: IpFamily) {
    this.family = family;
  }

  /** The first validation error, if any; a script with an error must not be run. */
  get error(): TypeError | undefined {
    return this.#error;
  }

  /** Number of rules appended (not counting chain declarations and deletions). */
  get ruleCount(): number {
    return this.#ruleCount;
  }

  /** The number of rules appended (`-A`) to each chain of a table. */
  appendedRules(table: IptablesTable): ReadonlyMap<string, number> {
    return this.#tables.get(table)?.appended ?? new Map();
  }

  /** True when the script would change nothing. */
  get isEmpty(): boolean {
    return this.#tables.size === 0;
  }

  /** Declares a chain: created if missing, flushed if present. Idempotent. */
  declareChain(table: IptablesTable, chain: string): this {
    if (!this.#validChain(chain)) return this;
    const content = this.#table(table);
    if (!content.declared.has(chain)) {
      content.declared.add(chain);
      content.chains.push(chain);
    }
    return this;
  }

  /**
   * Lets rules be appended to a chain the kernel already holds, after its
   * rules there: the chain is neither declared (so not flushed) nor created.
   */
  keepChain(table: IptablesTable, chain: string): this {
    if (this.#validChain(chain)) this.#table(table).declared.add(chain);
    return this;
  }

  /** Appends a rule to a chain this script declares or keeps. */
  appendRule(table: IptablesTable, chain: string, args: readonly string[]): this {
    if (this.#error) return this;
    const content = this.#tables.get(table);
    if (!content?.declared.has(chain)) {
      this.#fail(`Cannot append to chain "${chain}" in table ${table}: chain not declared or kept`);
      return this;
    }
    this.#addLine(table, "-A", chain, args);
    return this;
  }

  /** Inserts a rule at the top of any chain, e.g. a jump in a built-in chain. */
  insertRule(table: IptablesTable, chain: string, args: readonly string[]): this {
    if (!this.#validChain(chain)) return this;
    this.#addLine(table, "-I", chain, args);
    return this;
  }

  /** Deletes a rule (given by its arguments) from any chain, e.g. a jump in a built-in chain. */
  deleteRule(table: IptablesTable, chain: string, args: readonly string[]): this {
    if (!this.#validChain(chain)) return this;
    this.#addLine(table, "-D", chain, args);
    return this;
  }

  /** Deletes a chain: declared (so flushed) first, then `-X` after all rules. */
  deleteChain(table: IptablesTable, chain: string): this {
    this.declareChain(table, chain);
    if (!this.#error) this.#table(table).deleted.push(chain);
    return this;
  }

  /** Names of the chains this script declares in a table, in order. */
  chainNames(table: IptablesTable): string[] {
    return [...(this.#tables.get(table)?.chains ?? [])];
  }

  /** Names of the chains this script deletes in a table, in order. */
  deletedChains(table: IptablesTable): string[] {
    return [...(this.#tables.get(table)?.deleted ?? [])];
  }

  /** The exact restore input; a pending error is appended as a `# ERROR:` comment. */
  toString(): string {
    const lines: string[] = [];
    for (const table of TABLE_ORDER) {
      const content = this.#tables.get(table);
      if (!content) continue;
      lines.push(`*${table}`);
      for (const chain of content.chains) lines.push(`:${chain} - [0:0]`);
      for (const rule of content.rules) lines.push(rule);
      for (const chain of content.deleted) lines.push(`-X ${chain}`);
      lines.push("COMMIT");
    }
    if (this.#error) lines.push(`# ERROR: ${this.#error.message}`);
    return lines.length === 0 ? "" : lines.join("\n") + "\n";
  }

  #addLine(
    table: IptablesTable,
    verb: "-A" | "-I" | "-D",
    chain: string,
    args: readonly string[],
  ): void {
    const words: string[] = [verb, chain];
    for (const arg of args) {
      const word = quoteArg(arg);
      if (word === undefined) {
        this.#fail(`Cannot use argument ${JSON.stringify(arg)} in chain "${chain}": unsafe`);
        return;
      }
      words.push(word);
    }
    const content = this.#table(table);
    content.rules.push(words.join(" "));
    if (verb === "-A") content.appended.set(chain, (content.appended.get(chain) ?? 0) + 1);
    this.#ruleCount++;
  }

  #table(table: IptablesTable): TableContent {
    let content = this.#tables.get(table);
    if (!content) {
      content = { chains: [], declared: new Set(), rules: [], appended: new Map(), deleted: [] };
      this.#tables.set(table, content);
    }
    return content;
  }

  #validChain(chain: string): boolean {
    if (this.#error) return false;
    if (!CHAIN_NAME.test(chain) || chain.length > MAX_CHAIN_NAME_LENGTH) {
      this.#fail(`Cannot use chain name "${chain}": not a valid iptables chain name`);
      return false;
    }
    return true;
  }

  #fail(message: string): void {
    this.#error ??= new TypeError(message);
  }
}

function quoteArg(arg: string): string | undefined {
  if (SAFE_ARG.test(arg)) return arg;
  if (QUOTABLE_ARG.test(arg)) return `"${arg}"`;
  return undefined;
}
