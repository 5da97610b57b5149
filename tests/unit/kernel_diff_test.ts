import assert from "node:assert/strict";
import { plan, servicePort } from "../golden/nftables/fixtures.ts";
import { diffListings, formatServiceDiffs, groupByService } from "../../lib/commands/diff.ts";
import { nftServiceOf, parseNftListing } from "../../backends/nftables/listing.ts";
import { iptablesServiceOf, parseIptablesSave } from "../../backends/iptables/save.ts";

const NFT = `table ip kproxy {
	comment "rules for kproxy"
	map service-ips {
		type ipv4_addr . inet_proto . inet_service : verdict
		comment "ClusterIP traffic"
		elements = { 10.96.0.53 . udp . 53 : goto svc-kube-system/kube-dns/udp/dns,
			     10.96.0.10 . tcp . 80 : goto svc-default/web/tcp/http }
	}

	set canary {
		type mark
		elements = { 0x00000007 }
	}

	set connection-counters {
		type ipv4_addr . inet_proto . inet_service
		counter
		elements = { 10.96.0.10 . tcp . 80 counter packets 12 bytes 720,
			     10.96.0.53 . udp . 53 counter packets 0 bytes 0 }
	}

	map aff-default/sticky/tcp/http {
		type ipv4_addr : ipv4_addr
		size 65535
		flags dynamic,timeout
		timeout 3h
		elements = { 10.201.0.2 timeout 3h expires 2h59m : 10.244.1.10 }
	}

	chain svc-default/web/tcp/http {
		numgen random mod 2 0 counter packets 3 bytes 180 dnat to 10.244.1.10:8080 # handle 12
		dnat to 10.244.2.10:8080 # handle 13
	}
}
`;

Deno.test("parseNftListing() keeps rules and elements, drops handles, counters and dynamic state", () => {
  const listing = parseNftListing(NFT);
  assert.deepEqual([...listing.get("ip chain svc-default/web/tcp/http")!], [
    "numgen random mod 2 0 dnat to 10.244.1.10:8080",
    "dnat to 10.244.2.10:8080",
  ]);
  const ips = listing.get("ip map service-ips")!;
  assert.ok(ips.has("10.96.0.10 . tcp . 80 : goto svc-default/web/tcp/http"));
  assert.equal([...ips].filter((line) => line.includes(" : goto ")).length, 2);
  assert.ok(![...listing.get("ip set canary")!].some((line) => line.includes("0x")));
  assert.deepEqual([...listing.get("ip set connection-counters")!], [
    "type ipv4_addr . inet_proto . inet_service",
    "counter",
    "10.96.0.10 . tcp . 80",
    "10.96.0.53 . udp . 53",
  ], "element counters are traffic, not state to diff");
  const affinity = [...listing.get("ip map aff-default/sticky/tcp/http")!];
  assert.ok(!affinity.some((line) => line.includes("10.244.1.10")), "learned elements ignored");
});

Deno.test("diffListings() of a listing with itself is empty", () => {
  assert.deepEqual(diffListings(parseNftListing(NFT), parseNftListing(NFT)), []);
  assert.equal(
    formatServiceDiffs([]),
    "in sync: the kernel holds what the next sync would program\n",
  );
});

Deno.test("groupByService() attributes changed rules and elements to their service", () => {
  const kernel = parseNftListing(
    NFT.replace("dnat to 10.244.2.10:8080 # handle 13", "dnat to 10.244.2.99:8080 # handle 14")
      .replace(/\s+10\.96\.0\.10 \. tcp \. 80 : goto svc-default\/web\/tcp\/http/, "")
      .replace("dns,", "dns"),
  );
  const groups = groupByService(diffListings(parseNftListing(NFT), kernel), nftServiceOf([]));
  assert.deepEqual(groups.map((group) => group.service), ["default/web"]);
  const text = formatServiceDiffs(groups);
  assert.match(text, /service default\/web:/);
  assert.match(text, /- dnat to 10\.244\.2\.99:8080/);
  assert.match(text, /\+ dnat to 10\.244\.2\.10:8080/);
  assert.match(text, /\+ 10\.96\.0\.10 \. tcp \. 80 : goto svc-default\/web/);
});

Deno.test("groupByService() attributes slot-map and dispatch elements by their key", () => {
  const owners = nftServiceOf([
    plan([servicePort("ns1", "web", { clusterIPs: ["172.30.0.10"], nodePort: 30080 })]),
  ]);
  const groups = groupByService([
    {
      block: "ip map service-endpoints",
      added: ["172.30.0.10 . tcp . 80 . 1 : 10.180.0.2 . 8080"],
      removed: ["tcp . 30080 . 0 : 10.180.0.1 . 8080", "172.30.9.9 . tcp . 80 . 0 : 10.1.1.1 . 80"],
    },
  ], owners);
  assert.deepEqual(groups.map((g) => g.service), ["ns1/web", "(global)"]);
  assert.deepEqual(groups[0]!.blocks[0]!.added, ["172.30.0.10 . tcp . 80 . 1 : 10.180.0.2 . 8080"]);
  assert.deepEqual(groups[0]!.blocks[0]!.removed, ["tcp . 30080 . 0 : 10.180.0.1 . 8080"]);
});

Deno.test("diffListings() reports stale and missing blocks", () => {
  const desired = parseNftListing(NFT);
  const kernel = parseNftListing(NFT);
  kernel.delete("ip chain svc-default/web/tcp/http");
  kernel.set("ip chain svc-default/gone/tcp/http", new Set(["dnat to 10.244.9.9:80"]));
  const text = formatServiceDiffs(groupByService(diffListings(desired, kernel), nftServiceOf([])));
  assert.match(
    text,
    /service default\/gone:\n {2}ip chain svc-default\/gone\/tcp\/http\n {4}- \(stale/,
  );
  assert.match(
    text,
    /service default\/web:\n {2}ip chain svc-default\/web\/tcp\/http\n {4}\+ \(new/,
  );
});

Deno.test("parseIptablesSave() reads a chain written under its alternate name as the upstream one", () => {
  const save = (suffix: string) =>
    `*nat
:KUBE-SERVICES - [0:0]
:KUBE-SVC-NPX46M4PTMTKRN6Y${suffix} - [0:0]
:KUBE-SEP-AAAAAAAAAAAAAAAA${suffix} - [0:0]
-A KUBE-SERVICES -d 10.96.0.10/32 -p tcp -m tcp --dport 80 -j KUBE-SVC-NPX46M4PTMTKRN6Y${suffix}
-A KUBE-SVC-NPX46M4PTMTKRN6Y${suffix} -j KUBE-SEP-AAAAAAAAAAAAAAAA${suffix}
COMMIT
`;
  assert.deepEqual(parseIptablesSave(save("-2")), parseIptablesSave(save("")));
});

Deno.test("parseIptablesSave() keeps KUBE-* chains per table, without counters", () => {
  const listing = parseIptablesSave(`*nat
:PREROUTING ACCEPT [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-SVC-NPX46M4PTMTKRN6Y - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A KUBE-SERVICES -d 10.96.0.10/32 -p tcp -m comment --comment "default/web:http cluster IP" -m tcp --dport 80 -j KUBE-SVC-NPX46M4PTMTKRN6Y
COMMIT
`);
  assert.deepEqual([...listing.keys()], ["nat KUBE-SERVICES", "nat KUBE-SVC-NPX46M4PTMTKRN6Y"]);
  assert.equal(listing.get("nat KUBE-SVC-NPX46M4PTMTKRN6Y")!.size, 0);
  const removed = new Map(listing);
  removed.set("nat KUBE-SERVICES", new Set());
  const groups = groupByService(diffListings(listing, removed), iptablesServiceOf);
  assert.deepEqual(groups.map((group) => group.service), ["default/web"]);
});
