/**
 * The architecture's rules, checked over the source text: the functional
 * core touches no `Deno.*` API, no module imports itself back (a runtime
 * import circle), and the folders import each other only one way.
 */
import assert from "node:assert/strict";

const ROOT = new URL("../../", import.meta.url);

async function sourceFiles(dir: string): Promise<string[]> {
  const files: string[] = [];
  for await (const entry of Deno.readDir(new URL(dir, ROOT))) {
    const path = `${dir}/${entry.name}`;
    if (entry.isDirectory) files.push(...await sourceFiles(path));
    else if (entry.name.endsWith(".ts")) files.push(path);
  }
  return files.sort();
}

/** One relative import of a module: where it points and whether it is erased at run time. */
interface Edge {
  to: string;
  typeOnly: boolean;
}

const IMPORT = /^(import|export)\s+(type\s+)?(?:[^;]*?\sfrom\s+)?"(\.[^"]+)"/gm;
const DYNAMIC_IMPORT = /\bimport\(\s*"(\.[^"]+)"\s*\)/g;

function resolve(from: string, specifier: string): string {
  return new URL(specifier, new URL(from, ROOT)).pathname.slice(ROOT.pathname.length);
}

/** Strips comments, so a JSDoc example is not an import or an API call. */
function code(text: string): string {
  return text.replace(/\/\*[\s\S]*?\*\//g, "").replace(/^\s*\/\/.*$/gm, "");
}

async function importGraph(files: string[]): Promise<Map<string, Edge[]>> {
  const graph = new Map<string, Edge[]>();
  for (const file of files) {
    const text = code(await Deno.readTextFile(new URL(file, ROOT)));
    const edges: Edge[] = [];
    for (const [, , type, specifier] of text.matchAll(IMPORT)) {
      edges.push({ to: resolve(file, specifier!), typeOnly: type !== undefined });
    }
    for (const [, specifier] of text.matchAll(DYNAMIC_IMPORT)) {
      edges.push({ to: resolve(file, specifier!), typeOnly: false });
    }
    graph.set(file, edges);
  }
  return graph;
}

/** Every strongly connected group of more than one module (Tarjan), over the edges kept. */
function circles(graph: Map<string, Edge[]>, keep: (edge: Edge) => boolean): string[][] {
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[][] = [];
  const visit = (node: string) => {
    index.set(node, index.size);
    low.set(node, index.get(node)!);
    stack.push(node);
    onStack.add(node);
    for (const edge of (graph.get(node) ?? []).filter(keep)) {
      if (!index.has(edge.to)) {
        visit(edge.to);
        low.set(node, Math.min(low.get(node)!, low.get(edge.to)!));
      } else if (onStack.has(edge.to)) {
        low.set(node, Math.min(low.get(node)!, index.get(edge.to)!));
      }
    }
    if (low.get(node) === index.get(node)) {
      const group: string[] = [];
      let member: string;
      do {
        member = stack.pop()!;
        onStack.delete(member);
        group.push(member);
      } while (member !== node);
      if (group.length > 1) found.push(group.sort());
    }
  };
  for (const node of graph.keys()) if (!index.has(node)) visit(node);
  return found;
}

const APP = async () => [
  ...await sourceFiles("lib"),
  ...await sourceFiles("backends"),
  "main.ts",
];

Deno.test("layering: the functional core (lib/core/) uses no Deno API", async () => {
  const offenders: string[] = [];
  for (const file of await sourceFiles("lib/core")) {
    const text = code(await Deno.readTextFile(new URL(file, ROOT)));
    if (/\bDeno\./.test(text)) offenders.push(file);
  }
  assert.deepEqual(offenders, []);
});

Deno.test("layering: the core imports neither the shell, the commands nor the backends", async () => {
  const graph = await importGraph(await sourceFiles("lib/core"));
  const wrong = [...graph].flatMap(([from, edges]) =>
    edges.filter((edge) => /^(lib\/(shell|commands)|backends)\//.test(edge.to))
      .map((edge) => `${from} -> ${edge.to}`)
  );
  assert.deepEqual(wrong, []);
});

Deno.test("layering: no runtime import circle in lib/, backends/, scripts/ or main.ts", async () => {
  const graph = await importGraph([...await APP(), ...await sourceFiles("scripts")]);
  assert.deepEqual(circles(graph, (edge) => !edge.typeOnly), []);
});

Deno.test("layering: lib/ reaches backends/ only through the registry, and nothing ships imports tests/", async () => {
  const graph = await importGraph([...await APP(), ...await sourceFiles("scripts")]);
  const wrong = [...graph].flatMap(([from, edges]) =>
    edges.filter((edge) =>
      edge.to.startsWith("tests/") ||
      (from.startsWith("lib/") && edge.to.startsWith("backends/") &&
        edge.to !== "backends/registry.ts") ||
      ((from.startsWith("lib/") || from.startsWith("backends/")) && edge.to.startsWith("scripts/"))
    ).map((edge) => `${from} -> ${edge.to}`)
  );
  assert.deepEqual(wrong, []);
});

Deno.test("layering: the one import circle through types is Config and the mode registry", async () => {
  // A Config names its mode and a mode's factory takes a Config: a loop of
  // type-only imports, erased at run time.
  const graph = await importGraph(await APP());
  const typeCircles = circles(graph, () => true);
  for (const group of typeCircles) {
    assert.ok(
      group.includes("backends/registry.ts") && group.includes("lib/config/types.ts"),
      group.join(", "),
    );
  }
  assert.ok(typeCircles.length <= 1);
});
