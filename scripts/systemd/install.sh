#!/usr/bin/env bash
# Installs kproxy as a systemd service: the binary, its config and the unit.
# Usage: sudo scripts/systemd/install.sh [path/to/kproxy] [path/to/config.yaml]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
binary=${1:-dist/kproxy-x86_64-unknown-linux-gnu}
config=${2:-}

[ "$(id -u)" = 0 ] || { echo "install.sh: run as root" >&2; exit 1; }
[ -x "$binary" ] || { echo "install.sh: $binary is not an executable (run 'deno task compile' first)" >&2; exit 1; }

install -m 0755 "$binary" /usr/local/bin/kproxy
install -d -m 0755 /etc/kproxy /var/lib/kproxy
if [ -n "$config" ]; then
  install -m 0644 "$config" /etc/kproxy/config.yaml
elif [ ! -f /etc/kproxy/config.yaml ]; then
  install -m 0644 "$here/config.yaml" /etc/kproxy/config.yaml
fi
install -m 0644 "$here/kproxy.service" /etc/systemd/system/kproxy.service
systemctl daemon-reload
systemctl enable --now kproxy.service
systemctl --no-pager status kproxy.service || true
