#!/usr/bin/env bash
# ensure-mysql.sh: install what a fresh machine lacks to run MySQL 9.7 for
# causallab: ensure-engine.sh mysql (see there).
exec bash "$(dirname "$0")/ensure-engine.sh" mysql "$@"
