#!/usr/bin/env bash
# Install etcd (Debian's etcd-server/etcd-client) for the etcd store tests.
# Sourced or run from .ci/run as root; non-interactive; idempotent.
#
# The tests start their own etcd on free loopback ports and never use a system
# service. Debian's postinst would try to start etcd.service on 127.0.0.1:2379;
# a policy-rc.d that refuses service starts keeps it from doing so (and on a
# machine without systemd there is nothing to start anyway); under systemd the
# unit is also disabled and stopped.
set -euo pipefail
# shellcheck source=../../scripts/install-steps.sh
. "$(dirname "${BASH_SOURCE[0]}")/../../scripts/install-steps.sh"

if command -v etcd >/dev/null 2>&1 && command -v etcdctl >/dev/null 2>&1; then
  echo "etcd-ci-install: $(etcd --version 2>/dev/null | head -n1) already present"
  exit 0
fi

start=$(date +%s)

policy=/usr/sbin/policy-rc.d
installed_policy=0
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' >"$policy"
  chmod 0755 "$policy"
  installed_policy=1
fi
cleanup() { if [ "$installed_policy" = 1 ]; then rm -f "$policy"; fi; }
trap cleanup EXIT

# The package lists may be absent on a fresh machine.
if ! apt_get install -y -q --no-install-recommends etcd-server etcd-client >/dev/null 2>&1; then
  step "apt-get update" apt_get update -q >/dev/null
  step "apt-get install etcd-server etcd-client" apt_get install -y -q --no-install-recommends \
    -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
    etcd-server etcd-client >/dev/null
fi

# Belt and braces: no system etcd keeps running.
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
  systemctl disable --now etcd.service >/dev/null 2>&1 || true
fi
if pgrep -x etcd >/dev/null 2>&1; then
  echo "etcd-ci-install: note: an etcd process is already running (the tests use their own ports)" >&2
fi

echo "etcd-ci-install: installed $(etcd --version | head -n1) in $(( $(date +%s) - start ))s"
