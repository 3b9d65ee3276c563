#!/usr/bin/env bash
# ensure-engine.sh ENGINE: install what a fresh machine lacks to run one of
# causallab's database engines: mysql (MySQL 9.7), mariadb (MariaDB 11.8) or
# postgres (PostgreSQL 18).
#
# Idempotent. Builds (once) a Debian sid root filesystem holding the engine's
# server with mmdebstrap, and (when a Docker engine answers) imports it as a
# Docker image tagged with the server's version. Everything is cached outside
# the repository, under $CAUSALLAB_CACHE (default: $HOME/.cache/causallab):
#
#   engine    packages                                 root filesystem     image
#   mysql     mysql-server-core mysql-client           mysql-rootfs        causallab/mysql:<version>
#   mariadb   mariadb-server-core mariadb-client-core  mariadb-rootfs      causallab/mariadb:<version>
#   postgres  postgresql-18                            postgres-rootfs     causallab/postgres:<version>
#
# (mariadb-server-core holds the same mariadbd and mariadb-install-db as
# mariadb-server, without its service scripts, Perl tools and Galera: 172 MB
# instead of 542 MB.) For mysql, $CAUSALLAB_ROOTFS and $CAUSALLAB_IMAGE_REPO
# override the root filesystem path and the image name, as they always have.
#
# Prints the root filesystem path, the image tag ("" without Docker) and the
# version as key=value lines on success.
#
# ensure-engine.sh tar DIR writes to stdout the tar stream the image is
# imported from: root filesystem DIR without its runtime state (below).
set -euo pipefail

# The image holds the root filesystem as built, not what ran in it since:
# the local backend keeps each topology's data directories and logs under
# the root filesystem's tmp (hundreds of MB while one runs), and client
# histories land in root's home. The directories stay (tmp keeps its
# mode 1777); their contents are left out.
tar_excludes=(
  --exclude=./tmp/*
  --exclude=./var/tmp/*
  --exclude=./run/*
  --exclude=./proc/*
  --exclude=./sys/*
  --exclude=./root/.*_history
)

# rootfs_tar DIR: the image's tar stream of DIR on stdout. Files change
# under it while a topology runs on the root filesystem: GNU tar then
# exits 1 ("file changed as we read it", "file removed before we read
# it"), which under pipefail would fail the import; only exit codes above
# 1 (a fatal error) fail.
rootfs_tar() {
  local rc=0
  tar -C "$1" "${tar_excludes[@]}" --warning=no-file-changed --warning=no-file-removed \
    --warning=no-file-shrank --warning=no-file-ignored -c . || rc=$?
  if [ "$rc" -gt 1 ]; then
    echo "ensure-engine: tar of $1 failed (exit $rc)" >&2
    return "$rc"
  fi
}

if [ "${1:-}" = tar ]; then
  [ -d "${2:-}" ] || { echo "usage: ensure-engine.sh tar DIR (got '${2:-}': not a directory)" >&2; exit 2; }
  rootfs_tar "$2"
  exit 0
fi

engine=${1:-}
CACHE=${CAUSALLAB_CACHE:-$HOME/.cache/causallab}
case "$engine" in
mysql)
  ROOTFS=${CAUSALLAB_ROOTFS:-$CACHE/mysql-rootfs}
  IMAGE_REPO=${CAUSALLAB_IMAGE_REPO:-causallab/mysql}
  include=mysql-server-core,mysql-client
  server=/usr/sbin/mysqld
  ;;
mariadb)
  ROOTFS=$CACHE/mariadb-rootfs
  IMAGE_REPO=causallab/mariadb
  include=mariadb-server-core,mariadb-client-core
  server=/usr/sbin/mariadbd
  ;;
postgres)
  ROOTFS=$CACHE/postgres-rootfs
  IMAGE_REPO=causallab/postgres
  include=postgresql-18
  server=/usr/lib/postgresql/18/bin/postgres
  ;;
*)
  echo "usage: ensure-engine.sh mysql|mariadb|postgres (got '${engine}')" >&2
  exit 2
  ;;
esac
mkdir -p "$CACHE"

log() { echo "ensure-$engine: $*" >&2; }

need_pkgs=()
command -v mmdebstrap >/dev/null 2>&1 || need_pkgs+=(mmdebstrap)
if [ ${#need_pkgs[@]} -gt 0 ]; then
  log "installing Debian packages: ${need_pkgs[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi

if [ ! -x "$ROOTFS$server" ]; then
  log "building the $engine root filesystem in $ROOTFS (10-25 s)"
  tmp="$ROOTFS.tmp.$$"
  rm -rf "$tmp"
  mmdebstrap --quiet --variant=essential \
    --include="$include" \
    --aptopt='Acquire::Check-Valid-Until "false"' \
    sid "$tmp" >&2
  rm -rf "$ROOTFS"
  mv "$tmp" "$ROOTFS"
fi

# The version as the server reports it: 9.7.4, 11.8.9, 18.6.
version=$(chroot "$ROOTFS" "$server" --version | sed -E 's/.*(Ver|\(PostgreSQL\)) ([0-9]+\.[0-9]+(\.[0-9]+)?).*/\2/')
echo "$version" > "$ROOTFS/.causallab-$engine-version"
image="$IMAGE_REPO:$version"

if [ "${CAUSALLAB_SKIP_IMAGE:-}" != "1" ] && docker info >/dev/null 2>&1; then
  if ! docker image inspect "$image" >/dev/null 2>&1; then
    log "importing $ROOTFS as Docker image $image"
    rootfs_tar "$ROOTFS" | docker import - "$image" >/dev/null
  fi
else
  image=""
fi
echo "rootfs=$ROOTFS"
echo "image=$image"
echo "version=$version"
