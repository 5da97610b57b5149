/**
 * Makes one `nft -f -` input all-or-nothing at whatever byte its writer stops.
 *
 * nft reads its whole input before it sends one netlink batch, and the kernel
 * commits a batch whole or not at all; but a writer that dies leaves nft a
 * shorter input, and an input cut between two lines is a valid script that
 * nft commits. So every input is wrapped in a guard kept in a dormant table
 * of its own (`ip <table>-guard`, no packet passes it):
 *
 * ```
 * chain entry   { type filter hook prerouting priority 0 ; }   jump switch
 * chain switch                                                  (empty)
 * chain armed                                                   masquerade
 * ```
 *
 * The input's first operation after the guard's own set-up arms it (`add
 * rule … switch jump armed`) and its last operation disarms it (`flush chain
 * … switch`). While it is armed, a `masquerade` is reachable from a filter
 * prerouting chain, which the kernel refuses when it validates the batch's
 * final ruleset at commit (`Operation not supported`): an input that stops
 * anywhere after the arm commits nothing. One that stops before it can only
 * have rewritten the guard. nft's own syntax offers no block that could hold
 * `flush` or `delete` commands, and its JSON input (`nft -j`) cannot express
 * kproxy's maps in nft 1.0.6; the kernel's commit-time check can.
 *
 * The guard table must exist before a batch that arms it: after a batch
 * failed validation, the kernel (6.18) validates the rules of a table
 * created in the next batch as they are added, so arming a guard created in
 * the same batch would fail until another batch succeeds.
 * {@linkcode renderGuard} is therefore also run on its own before full syncs.
 *
 * @module
 */

import { Chain, Rule, Table, type TableRef, Transaction } from "./transaction.ts";

/** The dormant guard table of kproxy's `table` (any family: one guard covers a whole batch). */
export function guardTable(table: string): TableRef {
  return { family: "ip", table: `${table}-guard` };
}

const ENTRY = "entry";
const SWITCH = "switch";
const ARMED = "armed";

/**
 * The guard's set-up, idempotent: the dormant table, its three chains and the
 * rules of `entry` and `armed`, with `switch` empty (disarmed). Any prefix of
 * it changes the guard table only.
 */
export function renderGuard(guard: TableRef): Transaction {
  const tx = new Transaction(guard);
  tx.add(new Table({ dormant: true, comment: "keeps kproxy's nft loads all-or-nothing" }));
  tx.add(new Chain({ name: ENTRY, type: "filter", hook: "prerouting", priority: 0 }));
  for (const name of [SWITCH, ARMED]) tx.add(new Chain({ name }));
  for (const name of [ENTRY, SWITCH, ARMED]) tx.flush(new Chain({ name }));
  tx.add(new Rule({ chain: ENTRY, rule: `jump ${SWITCH}` }));
  tx.add(new Rule({ chain: ARMED, rule: "masquerade" }));
  return tx;
}

/** The arming operation alone: a batch of it must be refused (`nft -c` checks that). */
export function renderArm(guard: TableRef): Transaction {
  const tx = new Transaction(guard);
  tx.add(new Rule({ chain: SWITCH, rule: `jump ${ARMED}` }));
  return tx;
}

function renderDisarm(guard: TableRef): Transaction {
  const tx = new Transaction(guard);
  tx.flush(new Chain({ name: SWITCH }));
  return tx;
}

/**
 * The `nft -f -` input that applies `transactions` in one batch, all or
 * nothing: the guard's set-up, the arm, every transaction, the disarm. Made
 * in pieces of whole lines as it is read, like {@linkcode Transaction.chunks}.
 */
export function atomicInput(
  transactions: readonly Transaction[],
  guard: TableRef,
): Iterable<string> {
  const parts = [renderGuard(guard), renderArm(guard), ...transactions, renderDisarm(guard)];
  return {
    *[Symbol.iterator]() {
      for (const tx of parts) yield* tx.chunks();
    },
  };
}
