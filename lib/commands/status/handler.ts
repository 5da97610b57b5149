/**
 * The read-only status page served at `/statusz` on the metrics address: the
 * proxy's mode, version, node, uptime, what it programs (per IP family), a
 * chart and a table of its last syncs, the last failure and drift repairs.
 * HTML for people (`html.ts`), JSON for tools (`json.ts`).
 *
 * @module
 */

import { renderStatusHtml } from "./html.ts";
import { statusJson } from "./json.ts";
import type { StatusSnapshot } from "./snapshot.ts";

/**
 * Builds the `/statusz` handler. GET and HEAD only; JSON when the request
 * asks for it (`?format=json` or an `Accept` header preferring
 * `application/json`), HTML otherwise.
 *
 * @example Usage
 * ```ts ignore
 * const handler = statusHandler(() => snapshot());
 * Deno.serve((req) => new URL(req.url).pathname === "/statusz" ? handler(req) : notFound());
 * ```
 *
 * @param source Called once per request for a fresh snapshot.
 * @returns The request handler.
 */
export function statusHandler(source: () => StatusSnapshot): (req: Request) => Response {
  return (req) => {
    if (req.method !== "GET" && req.method !== "HEAD") {
      return new Response("405 method not allowed\n", {
        status: 405,
        headers: { allow: "GET, HEAD", "content-type": "text/plain; charset=utf-8" },
      });
    }
    const snapshot = source();
    const headers: Record<string, string> = {
      "cache-control": "no-store",
      "x-content-type-options": "nosniff",
    };
    if (wantsJson(req)) {
      headers["content-type"] = "application/json; charset=utf-8";
      return new Response(
        req.method === "HEAD" ? null : JSON.stringify(statusJson(snapshot), null, 2) + "\n",
        { headers },
      );
    }
    headers["content-type"] = "text/html; charset=utf-8";
    headers["content-security-policy"] =
      "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'none'; frame-ancestors 'none'";
    return new Response(req.method === "HEAD" ? null : renderStatusHtml(snapshot), { headers });
  };
}

function wantsJson(req: Request): boolean {
  const format = new URL(req.url).searchParams.get("format");
  if (format !== null) return format.toLowerCase() === "json";
  const accept = req.headers.get("accept") ?? "";
  const json = accept.indexOf("application/json");
  if (json < 0) return false;
  const html = accept.indexOf("text/html");
  return html < 0 || json < html;
}
