#!/usr/bin/env bash
# ensure-mysql.sh: install what a fresh machine lacks to run MySQL 9.7 for causallab.
#
# Idempotent. Builds (once) a Debian sid root filesystem holding mysqld and the
# mysql client with mmdebstrap, and (when a Docker engine answers) imports it as
# a Docker image tagged with the MySQL version. Everything is cached outside the
# repository, under $CAUSALLAB_CACHE (default: $HOME/.cache/causallab).
#
# Prints the root filesystem path and the image tag on success.
set -euo pipefail

CACHE=${CAUSALLAB_CACHE:-$HOME/.cache/causallab}
ROOTFS=${CAUSALLAB_ROOTFS:-$CACHE/mysql-rootfs}
IMAGE_REPO=${CAUSALLAB_IMAGE_REPO:-causallab/mysql}
mkdir -p "$CACHE"

log() { echo "ensure-mysql: $*" >&2; }

need_pkgs=()
command -v mmdebstrap >/dev/null 2>&1 || need_pkgs+=(mmdebstrap)
if [ ${#need_pkgs[@]} -gt 0 ]; then
  log "installing Debian packages: ${need_pkgs[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi

if [ ! -x "$ROOTFS/usr/sbin/mysqld" ]; then
  log "building the MySQL root filesystem in $ROOTFS (about 20 s)"
  tmp="$ROOTFS.tmp.$$"
  rm -rf "$tmp"
  mmdebstrap --quiet --variant=essential \
    --include=mysql-server-core,mysql-client \
    --aptopt='Acquire::Check-Valid-Until "false"' \
    sid "$tmp" >&2
  rm -rf "$ROOTFS"
  mv "$tmp" "$ROOTFS"
fi

version=$(chroot "$ROOTFS" mysqld --version | sed -E 's/.*Ver ([0-9]+\.[0-9]+\.[0-9]+).*/\1/')
echo "$version" > "$ROOTFS/.causallab-mysql-version"
image="$IMAGE_REPO:$version"

if [ "${CAUSALLAB_SKIP_IMAGE:-}" != "1" ] && docker info >/dev/null 2>&1; then
  if ! docker image inspect "$image" >/dev/null 2>&1; then
    log "importing $ROOTFS as Docker image $image"
    tar -C "$ROOTFS" -c . | docker import - "$image" >/dev/null
  fi
else
  image=""
fi
echo "rootfs=$ROOTFS"
echo "image=$image"
echo "version=$version"
