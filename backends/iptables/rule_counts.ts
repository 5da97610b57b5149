/**
 * Rules per chain kproxy owns, kept up to date as restore inputs run, with
 * each table's total kept alongside: the rule gauges read the totals after
 * every sync, which must not walk every chain (110k at 10k services).
 *
 * @module
 */

import type { IptablesTable } from "./chains.ts";

/** Rules per `table chain`, and per table. */
export class ChainRuleCounts {
  readonly #rules = new Map<string, number>();
  readonly #totals = new Map<IptablesTable, number>();

  /** A restore input declared `chain`, which flushes it. */
  flushed(table: IptablesTable, chain: string): void {
    this.#set(table, chain, 0);
  }

  /** A restore input appended `rules` rules to `chain`. */
  appended(table: IptablesTable, chain: string, rules: number): void {
    this.#set(table, chain, (this.#rules.get(`${table} ${chain}`) ?? 0) + rules);
  }

  /** A restore input deleted `chain`. */
  deleted(table: IptablesTable, chain: string): void {
    const key = `${table} ${chain}`;
    this.#addTotal(table, -(this.#rules.get(key) ?? 0));
    this.#rules.delete(key);
  }

  /** Rules in every counted chain of `table`. */
  total(table: IptablesTable): number {
    return this.#totals.get(table) ?? 0;
  }

  #set(table: IptablesTable, chain: string, rules: number): void {
    const key = `${table} ${chain}`;
    this.#addTotal(table, rules - (this.#rules.get(key) ?? 0));
    this.#rules.set(key, rules);
  }

  #addTotal(table: IptablesTable, delta: number): void {
    this.#totals.set(table, this.total(table) + delta);
  }
}
