/**
 * The test cluster's DNS: no CoreDNS image can be built offline, and pods must resolve Service
 * names without going through the proxy under test. Polls the apiserver every second and answers
 * UDP and TCP queries for the cluster domain only:
 *
 * - `<svc>.<ns>.svc.<domain>` A: the cluster IPv4 addresses, or for a headless Service the ready
 *   endpoint addresses; an ExternalName Service: a CNAME, followed while it stays in the domain.
 * - anything else: NXDOMAIN. There is no upstream resolver: nothing leaves the cluster.
 *
 * ```sh
 * deno run --unstable-net --allow-net --allow-read=PKI \
 *   scripts/cluster/dns.ts --listen 192.168.234.2 --apiserver https://192.168.234.1:7443 \
 *   --ca PKI/ca.crt --token-file PKI/token
 * ```
 *
 * @module
 */

import { parseArgs } from "node:util";

type DnsRecord = { kind: "A"; addresses: string[] } | { kind: "CNAME"; target: string };

const TYPE_A = 1;
const TYPE_CNAME = 5;
const TYPE_ANY = 255;
const NXDOMAIN = 3;
const TTL_SECONDS = 5;

/** The cluster's records by lower-case name without the final dot, from one poll. */
export function clusterRecords(
  services: any[],
  slices: any[],
  domain: string,
): Map<string, DnsRecord> {
  const ready = new Map<string, string[]>();
  for (const slice of slices) {
    if (slice.addressType !== "IPv4") continue;
    const owner = slice.metadata?.labels?.["kubernetes.io/service-name"];
    if (!owner) continue;
    const key = `${slice.metadata.namespace}/${owner}`;
    for (const endpoint of slice.endpoints ?? []) {
      if (endpoint.conditions?.ready === false) continue;
      ready.set(key, [...(ready.get(key) ?? []), ...(endpoint.addresses ?? [])]);
    }
  }
  const records = new Map<string, DnsRecord>();
  for (const service of services) {
    const { name, namespace } = service.metadata;
    const spec = service.spec ?? {};
    const fqdn = `${name}.${namespace}.svc.${domain}`.toLowerCase();
    if (spec.type === "ExternalName") {
      const target = String(spec.externalName ?? "").replace(/\.$/, "").toLowerCase();
      records.set(fqdn, { kind: "CNAME", target });
    } else if (!spec.clusterIP || spec.clusterIP === "None") {
      const addresses = [...new Set(ready.get(`${namespace}/${name}`) ?? [])];
      records.set(fqdn, { kind: "A", addresses: addresses.filter((a) => !a.includes(":")).sort() });
    } else {
      const ips: string[] = spec.clusterIPs ?? [spec.clusterIP];
      records.set(fqdn, { kind: "A", addresses: ips.filter((a) => !a.includes(":")) });
    }
  }
  return records;
}

function encodeName(name: string): number[] {
  const out: number[] = [];
  for (const label of name.split(".")) {
    if (!label) continue;
    const bytes = new TextEncoder().encode(label);
    out.push(bytes.length, ...bytes);
  }
  out.push(0);
  return out;
}

function resourceRecord(name: string, type: number, data: number[]): number[] {
  return [
    ...encodeName(name),
    type >> 8,
    type & 0xff,
    0,
    1, // class IN
    0,
    0,
    0,
    TTL_SECONDS,
    data.length >> 8,
    data.length & 0xff,
    ...data,
  ];
}

/** The answer to one DNS query message, or undefined when it cannot be parsed. */
export function answer(
  query: Uint8Array,
  records: Map<string, DnsRecord>,
  domain: string,
): Uint8Array | undefined {
  if (query.length < 17) return undefined;
  const labels: string[] = [];
  let offset = 12;
  while (offset < query.length && query[offset] !== 0) {
    const length = query[offset]!;
    if (length & 0xc0 || offset + 1 + length > query.length) return undefined;
    labels.push(new TextDecoder().decode(query.subarray(offset + 1, offset + 1 + length)));
    offset += 1 + length;
  }
  offset += 1;
  if (offset + 4 > query.length) return undefined;
  const qtype = (query[offset]! << 8) | query[offset + 1]!;
  const question = query.subarray(12, offset + 4);
  const name = labels.join(".").toLowerCase();
  const inZone = name === domain || name.endsWith(`.${domain}`);

  const answers: number[][] = [];
  let rcode = NXDOMAIN;
  let current = name;
  for (let hops = 0; hops < 8; hops++) {
    const record = records.get(current);
    if (!record) break;
    rcode = 0;
    if (record.kind === "CNAME") {
      answers.push(resourceRecord(current, TYPE_CNAME, encodeName(record.target)));
      if (qtype === TYPE_CNAME) break;
      current = record.target;
      continue;
    }
    if (qtype === TYPE_A || qtype === TYPE_ANY) {
      for (const address of record.addresses) {
        answers.push(resourceRecord(current, TYPE_A, address.split(".").map(Number)));
      }
    }
    break;
  }
  if (!inZone) rcode = NXDOMAIN;
  const recursionDesired = query[2]! & 0x01;
  const header = [
    query[0]!,
    query[1]!,
    0x84 | recursionDesired, // response, authoritative
    0x80 | rcode, // recursion available
    0,
    1,
    answers.length >> 8,
    answers.length & 0xff,
    0,
    0,
    0,
    0,
  ];
  return new Uint8Array([...header, ...question, ...answers.flat()]);
}

async function pollForever(
  options: { apiserver: string; ca: string; tokenFile: string; domain: string },
  publish: (records: Map<string, DnsRecord>) => void,
): Promise<never> {
  const client = Deno.createHttpClient({ caCerts: [await Deno.readTextFile(options.ca)] });
  const token = (await Deno.readTextFile(options.tokenFile)).trim();
  const get = async (path: string) => {
    const response = await fetch(`${options.apiserver}${path}`, {
      client,
      headers: { Authorization: `Bearer ${token}` },
      signal: AbortSignal.timeout(10_000),
    });
    if (!response.ok) throw new Error(`GET ${path}: ${response.status}`);
    return (await response.json()).items ?? [];
  };
  while (true) {
    try {
      const [services, slices] = await Promise.all([
        get("/api/v1/services"),
        get("/apis/discovery.k8s.io/v1/endpointslices"),
      ]);
      publish(clusterRecords(services, slices, options.domain));
    } catch (error) {
      console.error(`poll: ${error instanceof Error ? error.message : error}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
}

async function serveTcp(
  listener: Deno.Listener,
  respond: (query: Uint8Array) => Uint8Array | undefined,
) {
  for await (const connection of listener) {
    (async () => {
      try {
        const buffer = new Uint8Array(65_537);
        let filled = 0;
        while (filled < 2 || filled < 2 + ((buffer[0]! << 8) | buffer[1]!)) {
          const n = await connection.read(buffer.subarray(filled));
          if (n === null) return;
          filled += n;
        }
        const length = (buffer[0]! << 8) | buffer[1]!;
        const reply = respond(buffer.subarray(2, 2 + length));
        if (reply) {
          await connection.write(
            new Uint8Array([reply.length >> 8, reply.length & 0xff, ...reply]),
          );
        }
      } catch (error) {
        console.error(`tcp: ${error instanceof Error ? error.message : error}`);
      } finally {
        try {
          connection.close();
        } catch { /* closed by the peer */ }
      }
    })();
  }
}

if (import.meta.main) {
  const { values } = parseArgs({
    options: {
      listen: { type: "string" },
      apiserver: { type: "string" },
      ca: { type: "string" },
      "token-file": { type: "string" },
      domain: { type: "string", default: "cluster.local" },
    },
  });
  const { listen, apiserver, ca } = values;
  const tokenFile = values["token-file"];
  if (!listen || !apiserver || !ca || !tokenFile) {
    console.error("usage: dns.ts --listen IP --apiserver URL --ca FILE --token-file FILE");
    Deno.exit(2);
  }
  const domain = values.domain!.replace(/\.$/, "").toLowerCase();
  let records = new Map<string, DnsRecord>();
  pollForever({ apiserver, ca, tokenFile, domain }, (fresh) => records = fresh);
  const respond = (query: Uint8Array) => answer(query, records, domain);
  serveTcp(Deno.listen({ hostname: listen, port: 53 }), respond);
  const udp = Deno.listenDatagram({ hostname: listen, port: 53, transport: "udp" });
  console.log(`listening on ${listen}:53 for ${domain}`);
  for await (const [query, peer] of udp) {
    const reply = respond(query);
    if (reply) await udp.send(reply, peer).catch((e) => console.error(`udp: ${e.message}`));
  }
}
