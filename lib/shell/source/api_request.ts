/**
 * What one request to the apiserver is made of, for either transport
 * (`transport.ts`, `node_transport.ts`).
 *
 * @module
 */

/** PEM material of one TLS client: the CA to trust and an optional client certificate. */
export interface TlsMaterial {
  /** The only CA trusted for the server's certificate; the default roots when absent. */
  ca?: string;
  cert?: string;
  key?: string;
}

/** One request to the apiserver. */
export interface ApiRequest {
  url: string;
  headers: Record<string, string>;
  signal: AbortSignal;
  tls: TlsMaterial;
  /** Ask for a gzip-compressed body (lists); the Response carries the decoded bytes. */
  compressed?: boolean;
}

/** A request with a method and body (JSON text), for `ApiTransport.send`. */
export interface ApiWrite extends ApiRequest {
  method: "POST";
  body: string;
}
