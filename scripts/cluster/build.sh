#!/usr/bin/env bash
# Builds (or reuses) everything the test cluster runs, from source and Debian packages; nothing is
# pulled from a container registry and nothing is installed system-wide.
#   $ANCHOR/root   Go and etcd, unpacked from Debian packages (apt-get download + dpkg -x)
#   $ANCHOR/k8s    the Kubernetes 1.36 tree: openshift/microshift vendors it under
#                  deps/github.com/openshift/kubernetes (KUBE_SOURCE: a bare git directory of it)
#   $ANCHOR/bin    kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy
#   $CONF          kubectl, ginkgo, e2e.test, agnhost, and images/*.tar (agnhost, busybox, the
#                  conntrack regression server, pause) with repo-list.yaml mapping every e2e
#                  registry to localhost/... (KUBE_TEST_REPO_LIST)
# First time ~45 minutes on 2 cores (e2e.test alone 10-25); afterwards it only checks.
# usage: KUBE_SOURCE=/path/to/microshift.git build.sh [cluster]
#   cluster: only what the cluster and its cases need (no ginkgo, no e2e.test)
set -euo pipefail
. "$(dirname "$0")/lib.sh"
GOVER=${GOVER:-1.26}
KUBE_VERSION=${KUBE_VERSION:-v1.36.2}
DENO=${DENO:-deno}
mkdir -p "$A/debs" "$A/root" "$A/bin" "$C/images"

host_packages() { # the tools the nodes and the test images use, from the host's Debian
  local need=() p
  for p in busybox-static netcat-openbsd curl wget runc nftables iptables iproute2 conntrack openssl; do
    dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
  done
  [ "${#need[@]}" -eq 0 ] && return 0
  log "installing ${need[*]} from apt"
  apt-get update -qq # a fresh machine has no package lists
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=300 "${need[@]}"
}

toolchain() { # Go and etcd: Debian's, from trixie/sid when bookworm has no Go $GOVER
  [ -x "$A/root/usr/lib/go-$GOVER/bin/go" ] && [ -x "$A/root/usr/bin/etcd" ] && return 0
  if ! apt-cache policy "golang-$GOVER-go" | grep -q 'Candidate:.*[0-9]'; then
    local uri
    uri=$(awk '/^URIs:/ && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources)
    printf 'Types: deb\nURIs: %s\nSuites: trixie sid\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
      "$uri" >/etc/apt/sources.list.d/kpc-newer.sources
    printf 'Package: *\nPin: release n=trixie\nPin-Priority: 100\n\nPackage: *\nPin: release n=sid\nPin-Priority: 50\n' \
      >/etc/apt/preferences.d/kpc-newer
    apt-get update -qq
  fi
  (cd "$A/debs" && apt-get download "golang-$GOVER-go" "golang-$GOVER-src" etcd-server etcd-client)
  local deb
  for deb in "$A"/debs/*.deb; do dpkg -x "$deb" "$A/root"; done
}

source_tree() { # the vendored Kubernetes tree, written from git objects (absent blobs skipped)
  [ -f "$A/k8s/go.mod" ] && return 0
  [ -n "${KUBE_SOURCE:-}" ] || die "no Kubernetes tree in $A/k8s: set KUBE_SOURCE to a bare git directory of openshift/microshift"
  mkdir -p "$A/k8s"
  local prefix=deps/github.com/openshift/kubernetes missing=0 mode type sha path
  while IFS=$'\t' read -r meta path; do
    read -r mode type sha <<<"$meta"
    [ "$type" = blob ] || continue
    mkdir -p "$A/k8s/$(dirname "$path")"
    if ! git --git-dir="$KUBE_SOURCE" cat-file blob "$sha" >"$A/k8s/$path" 2>/dev/null; then
      rm -f "$A/k8s/$path"
      missing=$((missing + 1))
      continue
    fi
    case "$mode" in
      120000) target=$(cat "$A/k8s/$path") && rm "$A/k8s/$path" && ln -s "$target" "$A/k8s/$path" ;;
      100755) chmod 755 "$A/k8s/$path" ;;
    esac
  done < <(git --git-dir="$KUBE_SOURCE" ls-tree -r "HEAD:$prefix")
  log "Kubernetes tree written ($missing blobs absent from the snapshot; nothing built needs them)"
}

go_build() { # OUTPUT PACKAGE [go build flags]: unless OUTPUT exists; vendored, offline, niced
  local output=$1 package=$2
  shift 2
  [ -x "$output" ] && return 0
  log "building $(basename "$output")"
  (
    export GOROOT=$A/root/usr/lib/go-$GOVER PATH=$A/root/usr/lib/go-$GOVER/bin:$PATH
    export GOFLAGS=-mod=vendor GOPROXY=off GOTOOLCHAIN=local GOCACHE=$A/gocache GOPATH=$A/gopath CGO_ENABLED=0
    cd "$A/k8s"
    nice -n 10 go "${@:-build}" -trimpath \
      -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION -X k8s.io/client-go/pkg/version.gitVersion=$KUBE_VERSION" \
      -o "$output" "$package"
  )
}

binaries() {
  local cmd
  for cmd in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy; do
    go_build "$A/bin/$cmd" "./cmd/$cmd"
  done
  go_build "$C/kubectl" ./cmd/kubectl
  go_build "$C/agnhost" ./test/images/agnhost
  go_build "$C/regression-issue-74839" ./test/images/regression-issue-74839
  if [ ! -x "$C/pause" ]; then # a pod sandbox: sleeps until signalled, reaps children
    local d
    d=$(mktemp -d)
    cat >"$d/main.go" <<'GO'
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range signals {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var status syscall.WaitStatus
			if pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
}
GO
    printf 'module kpcpause\n\ngo 1.22\n' >"$d/go.mod"
    (cd "$d" && GOFLAGS= GOTOOLCHAIN=local GOCACHE=$A/gocache CGO_ENABLED=0 \
      "$A/root/usr/lib/go-$GOVER/bin/go" build -trimpath -ldflags '-s -w' -o "$C/pause" .)
    rm -rf "$d"
  fi
}

e2e_binaries() { # the biggest build (e2e.test alone 10-25 minutes), last
  go_build "$C/ginkgo" ./vendor/github.com/onsi/ginkgo/v2/ginkgo
  go_build "$C/e2e.test" ./test/e2e test -c
}

image_version() { # NAME: the tag e2e.test expects for that image, from its manifest
  sed -n "s/.*configs\[$1\] = Config{list\.[A-Za-z0-9]*, \"[^\"]*\", \"\([^\"]*\)\"}.*/\1/p" \
    "$A/k8s/test/utils/image/manifest.go"
}

copy_program() { # ROOT SOURCE DESTINATION: a host program and every library it loads
  local root=$1 lib
  cp -L "$2" "$root$3"
  for lib in $(ldd "$2" | grep -o '/[^ ]*'); do
    mkdir -p "$root$(dirname "$lib")"
    cp -Ln "$lib" "$root$lib"
  done
}

busybox_applets() { # ROOT [SKIP...]: busybox and a link for each applet the root lacks
  local root=$1 applet
  shift
  cp /bin/busybox "$root/bin/busybox"
  for applet in $(/bin/busybox --list-full); do
    case " $* " in *" $(basename "$applet") "*) continue ;; esac
    [ -e "$root/$applet" ] || [ -L "$root/$applet" ] && continue
    mkdir -p "$root/$(dirname "$applet")"
    ln -s /bin/busybox "$root/$applet"
  done
}

write_image() { # NAME REFERENCE ROOT ENTRYPOINT [CMD]
  echo "$2" >"$C/images/$1.name"
  "$DENO" run --allow-read --allow-write --allow-run=tar,gzip "$CLUSTER_DIR/test_image.ts" \
    "$3" "$C/images/$1.tar" "$2" "$4" ${5:+"$5"}
}

images() {
  [ -f "$C/images/pause.tar" ] && [ -f "$C/images/agnhost.tar" ] && [ -f "$C/images/busybox.tar" ] &&
    [ -f "$C/images/regression.tar" ] && [ -f "$C/repo-list.yaml" ] && return 0
  cat >"$C/repo-list.yaml" <<EOF
promoterE2eRegistry: localhost/e2e-test-images
buildImageRegistry: localhost/build-image
gcEtcdRegistry: localhost
gcRegistry: localhost
sigStorageRegistry: localhost/sig-storage
privateRegistry: localhost/private
dockerLibraryRegistry: localhost/library
invalidRegistry: invalid.localhost/invalid
cloudProviderGcpRegistry: localhost/cloud-provider-gcp
EOF
  local work=$C/images/roots root
  rm -rf "$work"
  mkdir -p "$work"

  # agnhost: the binary; bash as /bin/sh (Debian's busybox ash runs its own applets before PATH,
  # and busybox nc lacks the -v/-z/-u the tests use); GNU wget (busybox-static's segfaults), curl,
  # OpenBSD nc, ip; busybox for the rest.
  root=$work/agnhost
  mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,usr/local/bin,etc,tmp,uploads,root,home/user-defined-in-image}
  chmod 1777 "$root/tmp"
  cp "$C/agnhost" "$root/agnhost"
  ln -s agnhost "$root/agnhost-2"
  cp "$A/k8s/test/images/agnhost/porter/localhost.crt" "$A/k8s/test/images/agnhost/porter/localhost.key" \
    "$root/" 2>/dev/null || true
  copy_program "$root" /usr/bin/curl /usr/bin/curl
  copy_program "$root" /bin/nc.openbsd /usr/bin/nc
  copy_program "$root" /usr/bin/wget /usr/bin/wget
  copy_program "$root" /bin/bash /bin/bash
  copy_program "$root" /sbin/ip /sbin/ip
  local lib
  for lib in libnss_files.so.2 libnss_dns.so.2 libresolv.so.2; do
    [ -e "/lib/x86_64-linux-gnu/$lib" ] && cp -Ln "/lib/x86_64-linux-gnu/$lib" "$root/lib/x86_64-linux-gnu/$lib"
  done
  busybox_applets "$root" curl nc bash ip sh wget
  ln -s bash "$root/bin/sh"
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\nuser-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh\n' \
    >"$root/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\nuser-defined-in-image:x:1000:\ngroup-defined-in-image:x:50000:user-defined-in-image\n' \
    >"$root/etc/group"
  echo 'hosts: files dns' >"$root/etc/nsswitch.conf"
  write_image agnhost "localhost/e2e-test-images/agnhost:$(cat "$A/k8s/test/images/agnhost/VERSION")" \
    "$root" '["/agnhost"]' '["pause"]'

  root=$work/regression
  mkdir -p "$root"
  cp "$C/regression-issue-74839" "$root/"
  write_image regression "localhost/e2e-test-images/regression-issue-74839:$(image_version RegressionIssue74839)" \
    "$root" '["/regression-issue-74839"]'

  root=$work/busybox
  mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,tmp,etc}
  chmod 1777 "$root/tmp"
  busybox_applets "$root"
  cp "$work/agnhost/etc/passwd" "$work/agnhost/etc/group" "$root/etc/"
  write_image busybox "localhost/e2e-test-images/busybox:$(image_version BusyBox)" "$root" '["sh"]'

  root=$work/pause
  mkdir -p "$root"
  cp "$C/pause" "$root/pause"
  write_image pause "localhost/pause:$(image_version Pause)" "$root" '["/pause"]'
  rm -rf "$work"
}

host_packages
toolchain
source_tree
binaries
images
[ "${1:-}" = cluster ] || e2e_binaries
log "built: $(ls "$A/bin" | tr '\n' ' ')$(ls "$C" | tr '\n' ' ')"
