#!/usr/bin/env bash
# Installs the benchmark clients the proxy's integration tests and speed runs
# use: sysbench (Debian package; its Lua OLTP scripts ship with it). Uses the
# machine's own apt configuration. Idempotent.
set -euo pipefail
if command -v sysbench >/dev/null 2>&1; then
	exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
	SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends sysbench
sysbench --version
