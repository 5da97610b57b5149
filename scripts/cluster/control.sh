#!/usr/bin/env bash
# The control plane of the test cluster, in the host namespace, and the fabric its nodes join:
#   kpc-fabric netns: bridge kpcbr; the host's veth kpc-h (192.168.234.1/24) and each node's
#                     veth are its ports; the cluster DNS (dns.ts) on 192.168.234.2.
#   host:             etcd (127.0.0.1:3379), kube-apiserver (192.168.234.1:7443, token auth,
#                     RBAC, service CIDR $SVC_CIDR), controller-manager (node CIDRs from
#                     10.244.0.0/16, /24 each), scheduler (127.0.0.1 ports).
# The host forwards nothing: the apiserver reaches nodes on the fabric's own subnet.
# usage: control.sh up | down
set -euo pipefail
. "$(dirname "$0")/lib.sh"

pki() {
  [ -f "$P/token" ] && return 0
  mkdir -p "$P"
  openssl genrsa -out "$P/sa.key" 2048 2>/dev/null
  openssl rsa -in "$P/sa.key" -pubout -out "$P/sa.pub" 2>/dev/null
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$P/ca.key" -out "$P/ca.crt" -days 30 \
    -subj /CN=kpc-ca 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -keyout "$P/apiserver.key" -out "$P/apiserver.csr" \
    -subj /CN=kube-apiserver 2>/dev/null
  printf 'subjectAltName=IP:%s,IP:127.0.0.1,IP:%s,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local\nextendedKeyUsage=serverAuth\n' \
    "$HOST_IP" "${SVC_CIDR%.0/*}.1" >"$P/ext.cnf"
  openssl x509 -req -in "$P/apiserver.csr" -CA "$P/ca.crt" -CAkey "$P/ca.key" -CAcreateserial \
    -out "$P/apiserver.crt" -days 30 -extfile "$P/ext.cnf" 2>/dev/null
  head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$P/token"
  echo "$(cat "$P/token"),admin,admin,system:masters" >"$P/tokens.csv"
  cat >"$K/kubeconfig" <<KCF
apiVersion: v1
kind: Config
clusters:
- name: kpc
  cluster: {server: "$APISERVER", certificate-authority: "$P/ca.crt"}
users:
- name: admin
  user: {token: "$(cat "$P/token")"}
contexts:
- name: kpc
  context: {cluster: kpc, user: admin}
current-context: kpc
KCF
}

fabric_up() {
  ip netns list | grep -qw "$FABRIC_NS" && return 0
  ip netns add "$FABRIC_NS"
  ip -n "$FABRIC_NS" link set lo up
  ip -n "$FABRIC_NS" link add kpcbr type bridge
  ip -n "$FABRIC_NS" link set kpcbr up
  ip link add kpc-h type veth peer name kpc-f0
  ip link set kpc-f0 netns "$FABRIC_NS"
  ip -n "$FABRIC_NS" link set kpc-f0 master kpcbr up
  ip addr add "$HOST_IP/24" dev kpc-h
  ip link set kpc-h up
  ip -n "$FABRIC_NS" addr add "$DNS_IP/24" dev kpcbr
}

apiserver_up() {
  mkdir -p "$K/etcd-data"
  running etcd || start_bg etcd "$A/root/usr/bin/etcd" --name kpc --data-dir "$K/etcd-data" \
    --listen-client-urls http://127.0.0.1:3379 --advertise-client-urls http://127.0.0.1:3379 \
    --listen-peer-urls http://127.0.0.1:3380 --initial-advertise-peer-urls http://127.0.0.1:3380 \
    --initial-cluster kpc=http://127.0.0.1:3380 --listen-metrics-urls ''
  sleep 2
  # InternalIP only: the apiserver must never resolve a node name through the host's resolver.
  running apiserver || start_bg apiserver "$A/bin/kube-apiserver" \
    --etcd-servers=http://127.0.0.1:3379 --bind-address="$HOST_IP" --advertise-address="$HOST_IP" \
    --secure-port=7443 --tls-cert-file="$P/apiserver.crt" --tls-private-key-file="$P/apiserver.key" \
    --client-ca-file="$P/ca.crt" --token-auth-file="$P/tokens.csv" \
    --authorization-mode=Node,RBAC --allow-privileged=true \
    --service-account-issuer=https://kubernetes.default.svc \
    --service-account-key-file="$P/sa.pub" --service-account-signing-key-file="$P/sa.key" \
    --service-cluster-ip-range="$SVC_CIDR" --service-node-port-range=30000-32767 \
    --kubelet-preferred-address-types=InternalIP
  wait_for 120 "the apiserver" curl -sf --cacert "$P/ca.crt" \
    -H "Authorization: Bearer $(cat "$P/token")" "$APISERVER/readyz"
}

controllers_up() {
  running controller-manager || start_bg controller-manager "$A/bin/kube-controller-manager" \
    --kubeconfig="$K/kubeconfig" --authentication-kubeconfig="$K/kubeconfig" \
    --authorization-kubeconfig="$K/kubeconfig" --bind-address=127.0.0.1 --secure-port=10357 \
    --leader-elect=false --allocate-node-cidrs=false --cluster-cidr="$CLUSTER_CIDR" \
    --service-cluster-ip-range="$SVC_CIDR" --root-ca-file="$P/ca.crt" \
    --service-account-private-key-file="$P/sa.key" --use-service-account-credentials=false
  running scheduler || start_bg scheduler "$A/bin/kube-scheduler" --kubeconfig="$K/kubeconfig" \
    --authentication-kubeconfig="$K/kubeconfig" --authorization-kubeconfig="$K/kubeconfig" \
    --bind-address=127.0.0.1 --secure-port=10359 --leader-elect=false
}

# Pods resolve cluster names only (no upstream: nothing leaves the cluster), not through a proxy.
dns_up() {
  running dns && return 0
  # --allow-net without a list: Deno checks every UDP answer's destination (any pod's address
  # and port), and takes no address ranges. The fabric namespace reaches nothing but the cluster.
  start_bg dns nsenter --net="/run/netns/$FABRIC_NS" "${DENO:-deno}" run --unstable-net \
    --allow-net --allow-read="$P" \
    "$CLUSTER_DIR/dns.ts" --listen "$DNS_IP" --apiserver "$APISERVER" --ca "$P/ca.crt" \
    --token-file "$P/token"
  wait_for 30 "the cluster DNS" grep -q listening "$LOGS/dns.log"
}

down() {
  stop_bg dns
  stop_bg scheduler
  stop_bg controller-manager
  stop_bg apiserver 90
  stop_bg etcd
  # The cluster's objects go with it: a later `up` starts an empty cluster, not the last
  # run's DaemonSet and pods (which would put proxy rules on nodes before the no-rules case).
  rm -rf "$K/etcd-data"
  for n in $(seq 1 "$MAX_NODES"); do ip route del "$(pod_cidr "$n")" 2>/dev/null || true; done
  ip link del kpc-h 2>/dev/null || true
  ip netns del "$FABRIC_NS" 2>/dev/null || true
}

case "${1:-}" in
  up)
    pki
    fabric_up
    running apiserver || apiserver_up
    controllers_up
    dns_up
    ;;
  down) down ;;
  *)
    echo "usage: $0 up|down" >&2
    exit 2
    ;;
esac
