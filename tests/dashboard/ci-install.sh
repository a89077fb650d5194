#!/usr/bin/env bash
# Install Debian's Chromium and ChromeDriver for the dashboard browser tests.
# Run from .ci/run as root; non-interactive; idempotent (a no-op when present).
# No browser is ever downloaded by a test tool: only Debian's packages.
set -euo pipefail
# shellcheck source=../../scripts/install-steps.sh
. "$(dirname "${BASH_SOURCE[0]}")/../../scripts/install-steps.sh"

if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
  echo "dashboard ci-install: $(/usr/bin/chromedriver --version 2>/dev/null | head -n1) already present"
  exit 0
fi

start=$(date +%s)
# The package lists may be absent or stale on a fresh machine.
if ! apt_get install -y -q chromium chromium-driver >/dev/null 2>&1; then
  step "apt-get update" apt_get update -q >/dev/null
  step "apt-get install chromium chromium-driver" apt_get install -y -q -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
    chromium chromium-driver >/dev/null
fi
/usr/bin/chromedriver --version
echo "dashboard ci-install: installed in $(( $(date +%s) - start ))s"
