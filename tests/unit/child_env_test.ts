import assert from "node:assert/strict";
import { childEnvironment, MALLOC_TUNABLES } from "../../lib/shell/child_env.ts";

Deno.test("childEnvironment() gives programs glibc's huge-page heap when the operator set no tunables", () => {
  assert.deepEqual(childEnvironment(undefined), { GLIBC_TUNABLES: MALLOC_TUNABLES });
  assert.match(MALLOC_TUNABLES, /^glibc\.malloc\.hugetlb=1:glibc\.malloc\.top_pad=\d+$/);
});

Deno.test("childEnvironment() leaves an operator's GLIBC_TUNABLES to the programs as it is", () => {
  assert.deepEqual(childEnvironment("glibc.malloc.arena_max=2"), {});
  assert.deepEqual(childEnvironment(""), {});
});
