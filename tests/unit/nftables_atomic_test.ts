import assert from "node:assert/strict";
import { atomicInput, guardTable, renderArm, renderGuard } from "../../backends/nftables/atomic.ts";
import { Chain, Transaction } from "../../backends/nftables/transaction.ts";

const guard = guardTable("kproxy");

function tx(family: "ip" | "ip6", chains: number): Transaction {
  const t = new Transaction({ family, table: "kproxy" });
  for (let i = 0; i < chains; i++) t.add(new Chain({ name: `c${i}` }));
  return t;
}

Deno.test("renderGuard() sets up a dormant guard with the masquerade only the arm makes reachable", () => {
  assert.deepEqual(guard, { family: "ip", table: "kproxy-guard" });
  assert.equal(
    renderGuard(guard).toString(),
    [
      `add table ip kproxy-guard { flags dormant ; comment "keeps kproxy's nft loads all-or-nothing" ; }`,
      "add chain ip kproxy-guard entry { type filter hook prerouting priority 0 ; }",
      "add chain ip kproxy-guard switch",
      "add chain ip kproxy-guard armed",
      "flush chain ip kproxy-guard entry",
      "flush chain ip kproxy-guard switch",
      "flush chain ip kproxy-guard armed",
      "add rule ip kproxy-guard entry jump switch",
      "add rule ip kproxy-guard armed masquerade",
      "",
    ].join("\n"),
  );
  assert.equal(renderArm(guard).toString(), "add rule ip kproxy-guard switch jump armed\n");
});

Deno.test("atomicInput() is the guard set-up, the arm, every transaction and the disarm, in whole lines", () => {
  const transactions = [tx("ip", 3000), tx("ip6", 2)];
  const pieces = [...atomicInput(transactions, guard)];
  assert.ok(pieces.every((piece) => piece.endsWith("\n")), "pieces of whole lines");
  const text = pieces.join("");
  assert.equal(
    text,
    renderGuard(guard).toString() + renderArm(guard).toString() +
      transactions.map(String).join("") + "flush chain ip kproxy-guard switch\n",
  );
  assert.deepEqual([...atomicInput(transactions, guard)], pieces, "the same on every iteration");
});
