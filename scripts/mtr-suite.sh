#!/usr/bin/env bash
# mtr-suite.sh: run MySQL's own test suite (Debian sid's mysql-testsuite,
# mysql-test-run.pl --extern) one case at a time against a target, direct
# to the primary or through `causallab proxy` (multiplexed or not), each case
# on a fresh `causallab up --replicas 2` topology, and report pass / fail /
# skip per case; with several targets, also the cases that pass direct and
# fail through each proxy target.
#
#   scripts/mtr-suite.sh main.alias main.case          these cases, every target
#   scripts/mtr-suite.sh --cases-file FILE             one case per line (# comments)
#   scripts/mtr-suite.sh --all                         every main case (hours)
#   scripts/mtr-suite.sh --targets direct,proxy ...    only these targets
#                                                      (direct, proxy, proxy-multiplex)
#   scripts/mtr-suite.sh --fresh-every N ...           one topology per N cases
#                                                      (between cases: every
#                                                      non-system schema dropped,
#                                                      `test` re-created); default 1
#   scripts/mtr-suite.sh --resume ...                  keep OUT/TARGET.results and
#                                                      skip the cases it has
#                                                      (with CAUSALLAB_MTR_OUT)
#
# Environment: CAUSALLAB_MTR_OUT (directory for the results, each case's
# mysql-test-run output and the proxy's log; default a temporary directory,
# printed), CAUSALLAB_MTR_POLICY (the proxy's --policy; default the proxy's),
# CAUSALLAB_CACHE (default ~/.cache/causallab: the testsuite's root
# filesystem, built here on first use with mmdebstrap, about 3 minutes and
# 2 GB). Cases run as root@'%' without a password, with every privilege,
# created on the primary (MySQL's tests administer the server and log in as
# root, as on the servers mysql-test-run.pl starts itself). Loopback only.
#
# Results: OUT/TARGET.results, one "CASE STATUS" line per case: pass, fail,
# skipped (by mysql-test-run.pl itself), or not run, because the case
#   not-run-server-options  has a t/CASE-master.opt of its own or
#                           include/force_myisam_default.inc: server
#                           options --extern cannot give;
#   not-run-resets-gtids    runs RESET BINARY LOGS AND GTIDS (RESET
#                           MASTER), itself or in a file it sources:
#                           the primary's GTIDs start again at
#                           1, and replicas, which have those GTIDs
#                           already, skip its later transactions;
#   not-run-gtid-mode       sets gtid_mode or enforce_gtid_consistency
#                           (include/rpl/set_gtid_mode*.inc too): a
#                           replicated topology's servers cannot change
#                           it one at a time, and writes without GTIDs
#                           cannot be followed to a replica.
# OUT/TARGET/CASE.log is mysql-test-run's output. Exit status 0 when
# every case that passes direct passes through every proxy target run (or
# when only one target ran), 1 otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "mtr-suite: $*" >&2; }

targets=direct,proxy,proxy-multiplex
fresh_every=1
cases=()
while [ $# -gt 0 ]; do
	case $1 in
	--targets) targets=$2; shift 2 ;;
	--fresh-every) fresh_every=$2; shift 2 ;;
	--cases-file) mapfile -t -O "${#cases[@]}" cases < <(grep -vE '^\s*(#|$)' "$2"); shift 2 ;;
	--all) all=1; shift ;;
	--resume) resume=1; shift ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	-*) log "unknown option $1 (--help)"; exit 2 ;;
	*) cases+=("$1"); shift ;;
	esac
done
case $fresh_every in '' | *[!0-9]* | 0) log "--fresh-every wants a positive number, not '$fresh_every'"; exit 2 ;; esac

cache=${CAUSALLAB_CACHE:-$HOME/.cache/causallab}
mtrfs=$cache/mtr-rootfs
mysqlfs=${CAUSALLAB_ROOTFS:-$cache/mysql-rootfs}
suite=/usr/lib/mysql-test

ensure_rootfs() {
	if [ ! -f "$mtrfs/$suite/mysql-test-run.pl" ]; then
		command -v mmdebstrap >/dev/null 2>&1 || { apt-get update -qq >/dev/null && apt-get install -y -qq mmdebstrap >/dev/null; }
		log "building the testsuite's root filesystem in $mtrfs (about 3 minutes)"
		local tmp=$mtrfs.tmp.$$
		rm -rf "$tmp"
		mmdebstrap --quiet --variant=essential --include=mysql-testsuite,mysql-client,perl,openssl \
			--aptopt='Acquire::Check-Valid-Until "false"' sid "$tmp" >&2
		rm -rf "$mtrfs"
		mv "$tmp" "$mtrfs"
	fi
	# mysql-test-run.pl opens a TCP socket on "localhost" (hosts, protocols).
	cp /etc/hosts /etc/protocols /etc/services "$mtrfs/etc/" 2>/dev/null || true
}
ensure_rootfs
[ -x "$mysqlfs/usr/bin/mysql" ] || { log "no MySQL root filesystem in $mysqlfs: run make deps"; exit 1; }

if [ -n "${all:-}" ]; then
	mapfile -t cases < <(cd "$mtrfs/$suite/t" && ls *.test | sed 's/\.test$//; s/^/main./')
fi
[ ${#cases[@]} -gt 0 ] || { log "no cases: name them, or --cases-file, or --all (--help)"; exit 2; }

work=$(mktemp -d /tmp/causallab-mtr.XXXXXX)
out=${CAUSALLAB_MTR_OUT:-$work/out}
mkdir -p "$out"
bin=$work/causallab
state=$work/topology.json
proxy_pid=""
go build -o "$bin" ./cmd/causallab

stop_proxy() {
	if [ -n "$proxy_pid" ]; then
		kill "$proxy_pid" 2>/dev/null || true
		wait "$proxy_pid" 2>/dev/null || true
		proxy_pid=""
	fi
}
down() {
	stop_proxy
	[ -f "$state" ] && "$bin" down --state "$state" >/dev/null 2>&1 || true
	rm -f "$state"
}
cleanup() {
	set +e
	down
	rm -rf "$mtrfs/tmp/causallab-mtr-var.$$"
	if [ -n "${CAUSALLAB_MTR_OUT:-}" ]; then
		rm -rf "$work"
	else
		find "$work" -mindepth 1 -maxdepth 1 ! -name out -exec rm -rf {} +
	fi
}
trap cleanup EXIT

free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

admin() { # SQL, on the primary as the topology's account
	chroot "$mysqlfs" mysql -h "${primary%:*}" -P "${primary#*:}" -ucausallab -pcausallab -N -e "$1" 2>&1 | grep -v '^mysql: \[Warning\]' || true
}

# fresh_topology: a new topology, the `mtr` account and the `test` schema.
fresh_topology() {
	down
	# What mysql-test-run.pl gives the servers it starts itself
	# (include/default_mysqld.cnf, its mysqld arguments) that results
	# depend on.
	"$bin" up --backend local --replicas 2 --state "$state" \
		--set explain_format=TRADITIONAL_STRICT --set log_bin_trust_function_creators=1 \
		--set local_infile=ON >"$work/up.txt"
	primary=$(python3 -c 'import json,sys; n=[n for n in json.load(open(sys.argv[1]))["nodes"] if n["role"]=="primary"][0]; print("%s:%d" % (n["host"], n["port"]))' "$state")
	# MySQL's tests log in as root without a password (connect(...,root,,)),
	# as on the servers mysql-test-run.pl bootstraps, which also hold the
	# schemas test and mtr.
	admin "CREATE USER root@'%'; GRANT ALL ON *.* TO root@'%' WITH GRANT OPTION"
	bootstrap
}

# bootstrap: what mysql-test-run.pl's own bootstrap adds to a new server
# (the time zone test data, the schemas test and mtr, mtr's suppression
# and check procedures), read from the testsuite's files.
bootstrap() {
	local inc=$mtrfs/$suite/include
	# --force: the servers may hold time zones already (duplicate keys).
	{
		echo "CREATE DATABASE IF NOT EXISTS test; CREATE DATABASE IF NOT EXISTS mtr; USE mtr;"
		cat "$inc/mtr_warnings.sql" "$inc/mtr_check.sql"
		echo "USE mysql;"
		cat "$inc/mtr_test_data_timezone.sql"
	} | chroot "$mysqlfs" mysql --force -h "${primary%:*}" -P "${primary#*:}" -ucausallab -pcausallab 2>&1 |
		grep -v 'ERROR 1062' |
		grep -v '^mysql: \[Warning\]' >&2 || true
}

# clean_schemas: between cases on one topology.
clean_schemas() {
	local db
	for db in $(admin "SELECT schema_name FROM information_schema.schemata WHERE schema_name NOT IN ('mysql','sys','information_schema','performance_schema')"); do
		admin "DROP DATABASE \`$db\`" >/dev/null
	done
	bootstrap
}

# start_target TARGET: sets addr to where the cases connect.
start_target() {
	case $1 in
	direct) addr=$primary ;;
	proxy | proxy-multiplex)
		local port hport mux=false
		port=$(free_port)
		hport=$(free_port)
		[ "$1" = proxy-multiplex ] && mux=true
		"$bin" -v proxy --topology "$state" --listen "127.0.0.1:$port" --http "127.0.0.1:$hport" \
			${CAUSALLAB_MTR_PROXY_ARGS:-} ${CAUSALLAB_MTR_POLICY:+--policy "$CAUSALLAB_MTR_POLICY"} \
			--multiplex="$mux" >>"$out/$1-proxy.log" 2>&1 &
		proxy_pid=$!
		for _ in $(seq 1 100); do
			if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then break; fi
			sleep 0.1
		done
		addr=127.0.0.1:$port
		;;
	*) log "unknown target $1 (direct, proxy, proxy-multiplex)"; exit 2 ;;
	esac
}

# not_runnable CASE: why CASE cannot run on a replicated topology under
# --extern (a not-run-* status; nothing: it can).
not_runnable() {
	local t=$mtrfs/$suite/t/${1#main.}.test f
	# The case and the files it sources (one level: common/binlog/...,
	# include/...), where a reset may be.
	local files=("$t")
	for f in $(sed -nE 's/^[[:space:]]*-{0,2}[[:space:]]*source[[:space:]]+([^;[:space:]]+).*/\1/p' "$t" 2>/dev/null); do
		[ -f "$mtrfs/$suite/$f" ] && files+=("$mtrfs/$suite/$f")
	done
	if [ -f "${t%.test}-master.opt" ] || grep -q 'force_myisam_default.inc' "$t" 2>/dev/null; then
		# Server options of its own (t/CASE-master.opt, or MyISAM as the
		# default engine: include/force_myisam_default.inc):
		# mysql-test-run.pl starts a server with them; --extern cannot.
		echo not-run-server-options
	elif grep -qiE '^[^#]*RESET +(BINARY +LOGS +AND +GTIDS|MASTER)' "${files[@]}" 2>/dev/null; then
		echo not-run-resets-gtids
	elif grep -qiE '^[^#]*(SET +(@@)?(GLOBAL|PERSIST|PERSIST_ONLY)?[ .]*(gtid_mode|enforce_gtid_consistency) *=|source +include/rpl/set_gtid_mode)' "$t" 2>/dev/null; then
		echo not-run-gtid-mode
	fi
}

# run_case TARGET CASE: one mysql-test-run.pl; appends "CASE STATUS".
run_case() {
	local target=$1 c=$2 status why
	mkdir -p "$out/$target"
	why=$(not_runnable "$c")
	if [ -n "$why" ]; then
		echo "$c $why" >>"$out/$target.results"
		return
	fi
	chroot "$mtrfs" /bin/sh -c "cd $suite && perl mysql-test-run.pl --client-bindir=$suite/bin \
		--extern host=${addr%:*} --extern port=${addr#*:} --extern user=root \
		--vardir=/tmp/causallab-mtr-var.$$ --force --retry=0 --max-test-fail=0 --testcase-timeout=10 $c" \
		>"$out/$target/$c.log" 2>&1 || true
	status=$(grep -aE "^\[ *[0-9]+%\] $c " "$out/$target/$c.log" | sed -E 's/.*\[ ([a-z-]+) \].*/\1/' | head -1 || true)
	echo "$c ${status:-error}" >>"$out/$target.results"
}

IFS=, read -ra tlist <<<"$targets"
for target in "${tlist[@]}"; do
	[ -n "${resume:-}" ] && [ -f "$out/$target.results" ] || : >"$out/$target.results"
	log "$target: ${#cases[@]} cases"
	i=0
	for c in "${cases[@]}"; do
		if [ -n "${resume:-}" ] && grep -q "^$c " "$out/$target.results"; then
			continue
		fi
		if [ -n "$(not_runnable "$c")" ]; then
			run_case "$target" "$c" # recorded, no topology needed
			continue
		fi
		if [ $((i % fresh_every)) -eq 0 ]; then
			fresh_topology
			start_target "$target"
		else
			clean_schemas
		fi
		run_case "$target" "$c"
		i=$((i + 1))
	done
	down
	log "$target: $(grep -c ' pass$' "$out/$target.results" || true) pass, $(grep -c ' fail$' "$out/$target.results" || true) fail, $(grep -vcE ' (pass|fail)$' "$out/$target.results" || true) other"
done

rc=0
if [[ ",$targets," == *,direct,* ]]; then
	for target in "${tlist[@]}"; do
		[ "$target" = direct ] && continue
		lost=$(join <(awk '$2=="pass"{print $1}' "$out/direct.results" | sort) \
			<(awk '$2!="pass"{print $1}' "$out/$target.results" | sort) || true)
		n=$(awk '$2=="pass"' "$out/direct.results" | wc -l)
		k=$(echo "$lost" | grep -c . || true)
		echo "$target: $((n - k)) of the $n cases that pass direct pass"
		[ -n "$lost" ] && { echo "$lost" | sed 's/^/  fails through the proxy: /'; rc=1; }
	done
fi
echo "results: $out"
exit $rc
