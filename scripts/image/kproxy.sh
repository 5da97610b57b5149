#!/bin/sh
# /usr/local/bin/kproxy in the container image: computes the Deno permissions
# kproxy's flags and environment need (scripts/image/entrypoint.ts, the same
# computation as `deno task launch`), then replaces itself with
# `deno run <those permissions> /opt/kproxy/dist/kproxy.js "$@"`.
set -eu
# Deno's analysis of the bundle, made when the image was built
# (scripts/analysis_cache.ts): without it every start parses the whole bundle
# again. DENO_DIR is new at every start; where it cannot be written, Deno
# analyses the bundle itself, and this says so once per start.
analysis=/opt/kproxy/dist/dep_analysis_cache_v2
if [ -n "${DENO_DIR:-}" ] && [ ! -e "$DENO_DIR/dep_analysis_cache_v2" ]; then
  { mkdir -p "$DENO_DIR" && cp "$analysis" "$DENO_DIR/"; } ||
    echo "kproxy: cannot copy $analysis into DENO_DIR ($DENO_DIR): each start parses the bundle again (~12 MiB more at its peak); give the container a writable /tmp" >&2
fi
command=$(/usr/local/bin/deno run --no-config --no-prompt --allow-read --allow-env \
  --allow-sys=hostname /opt/kproxy/scripts/launch.js "$@")
eval "exec /usr/local/bin/deno $command"
