#!/bin/sh
# /usr/local/bin/kproxy in the container image: computes the Deno permissions
# kproxy's flags and environment need (scripts/image/entrypoint.ts, the same
# computation as `deno task launch`), then replaces itself with
# `deno run <those permissions> /opt/kproxy/dist/kproxy.js "$@"`.
set -eu
command=$(/usr/local/bin/deno run --no-config --no-prompt --allow-read --allow-env \
  --allow-sys=hostname /opt/kproxy/scripts/launch.js "$@")
eval "exec /usr/local/bin/deno $command"
