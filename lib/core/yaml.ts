/**
 * One YAML document as kproxy reads its own settings (the `--config` file and
 * kubeconfigs): js-yaml's core schema (YAML 1.2: `yes` stays a string, no
 * timestamps), duplicate keys refused, at most {@linkcode MAX_ALIASES}
 * aliases. The same parser reads manifests (`lib/shell/source/manifest.ts`).
 * An error names the line and column and never quotes the text: a kubeconfig
 * holds tokens and keys.
 *
 * @module
 */

import { loadAll, YAMLException } from "js-yaml";

/** Aliases one document may hold: a settings file needs few, an expansion bomb many. */
export const MAX_ALIASES = 100;

/** js-yaml's reason for an error, cut before anything it quotes from the text. */
export function safeYamlReason(reason: string): string {
  const cut = reason.search(/["'`]|!<|: /);
  return (cut < 0 ? reason : reason.slice(0, cut)).trim() || "invalid YAML";
}

/**
 * Parses the text of one YAML (or JSON) document; `null` for a text without
 * one (empty, or only comments).
 *
 * @example Usage
 * ```ts
 * import { parseYamlDocument } from "./yaml.ts";
 * parseYamlDocument("kind: Config\nclusters: []\n"); // { kind: "Config", clusters: [] }
 * ```
 *
 * @throws {SyntaxError} "deficient indentation at line 3, column 1" for text
 *   that is not one YAML document
 */
export function parseYamlDocument(text: string): unknown {
  let documents: unknown[];
  try {
    documents = loadAll(text, { maxAliases: MAX_ALIASES });
  } catch (error) {
    if (!(error instanceof YAMLException)) throw error;
    const { line = 0, column = 0 } = error.mark ?? {};
    throw new SyntaxError(
      `${safeYamlReason(error.reason)} at line ${line + 1}, column ${column + 1}`,
    );
  }
  if (documents.length > 1) {
    throw new SyntaxError(`expected a single document, found ${documents.length}`);
  }
  return documents[0] ?? null;
}
