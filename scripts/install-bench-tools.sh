#!/usr/bin/env bash
# install-bench-tools.sh: install the benchmark clients the proxy's tests and
# speed runs use. Idempotent; uses the machine's own apt configuration.
#
#   scripts/install-bench-tools.sh                 sysbench (Debian package)
#   scripts/install-bench-tools.sh --mysql-router  also MySQL Router, in its own
#       Debian sid root filesystem under $CAUSALLAB_CACHE (default
#       ~/.cache/causallab/mysqlrouter-rootfs), never in the MySQL one others
#       use; prints its path. Run it there with chroot.
set -euo pipefail

log() { echo "install-bench-tools: $*" >&2; }

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
	SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
updated=""
apt_install() {
	if [ -z "$updated" ]; then
		$SUDO apt-get update -qq >/dev/null
		updated=1
	fi
	$SUDO apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

if ! command -v sysbench >/dev/null 2>&1; then
	log "installing sysbench"
	apt_install sysbench
fi
sysbench --version >&2
if ! command -v jq >/dev/null 2>&1; then
	log "installing jq (scripts/driver-suite.sh reads the topology's state file with it)"
	apt_install jq
fi

if [ "${1:-}" = "--mysql-router" ]; then
	CACHE=${CAUSALLAB_CACHE:-$HOME/.cache/causallab}
	ROOTFS=${CAUSALLAB_ROUTER_ROOTFS:-$CACHE/mysqlrouter-rootfs}
	mkdir -p "$CACHE"
	command -v mmdebstrap >/dev/null 2>&1 || apt_install mmdebstrap
	if [ ! -x "$ROOTFS/usr/bin/mysqlrouter" ]; then
		log "building the MySQL Router root filesystem in $ROOTFS"
		tmp="$ROOTFS.tmp.$$"
		rm -rf "$tmp"
		mmdebstrap --quiet --variant=essential --include=mysql-router \
			--aptopt='Acquire::Check-Valid-Until "false"' sid "$tmp" >&2
		rm -rf "$ROOTFS"
		mv "$tmp" "$ROOTFS"
	fi
	chroot "$ROOTFS" mysqlrouter --version >&2
	echo "$ROOTFS"
fi
