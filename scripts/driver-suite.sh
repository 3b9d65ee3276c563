#!/usr/bin/env bash
# driver-suite.sh: run go-sql-driver/mysql's own test suite (the version in
# go.mod) against a MySQL primary directly and through `causallab proxy`, and
# fail when a test that passes directly fails through the proxy, unless
# scripts/driver-suite.allow lists it with the reason (a failure inherent to
# read/write splitting; docs/proxy-sessions.md explains each).
#
#   scripts/driver-suite.sh            start a topology (local backend, 1 + 2),
#                                      a proxy in front, run both, tear down
#   scripts/driver-suite.sh -run 'TestMultiQuery|TestLoadData'
#                                      only these tests (go test -run)
#
# Environment: CAUSALLAB_DRIVER_SUITE_OUT (directory for the two suites' logs,
# the proxy's own log and metrics, and the comparison; default: a temporary
# directory, printed), CAUSALLAB_DRIVER_SUITE_POLICY
# (the proxy's routing policy; default token-ryw-mr),
# CAUSALLAB_DRIVER_SUITE_WATERMARK (the proxy's --watermark-source: query or
# all-gtids; default the proxy's), CAUSALLAB_DRIVER_SUITE_MULTIPLEX (true
# or false: the proxy's --multiplex; default the proxy's),
# CAUSALLAB_DRIVER_SUITE_TIMEOUT (per run, go test -timeout; default 15m).
# TestConcurrent runs too (MYSQL_TEST_CONCURRENT=1: it opens connections
# until the server refuses one with 1040); TestConnectionAttributes skips
# itself (the topology runs with performance_schema OFF).
# Needs what `make deps` installs (the MySQL root filesystem). Loopback only.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

run_re=""
if [ "${1:-}" = "-run" ]; then
	run_re=$2
fi
policy=${CAUSALLAB_DRIVER_SUITE_POLICY:-token-ryw-mr}
wmsource=${CAUSALLAB_DRIVER_SUITE_WATERMARK:-}
multiplex=${CAUSALLAB_DRIVER_SUITE_MULTIPLEX:-}
timeout=${CAUSALLAB_DRIVER_SUITE_TIMEOUT:-15m}

log() { echo "driver-suite: $*" >&2; }

work=$(mktemp -d /tmp/causallab-driver-suite.XXXXXX)
out=${CAUSALLAB_DRIVER_SUITE_OUT:-$work/out}
mkdir -p "$out"
state=$work/topology.json
bin=$work/causallab
proxy_pid=""

cleanup() {
	set +e
	if [ -n "$proxy_pid" ]; then
		kill "$proxy_pid" 2>/dev/null
		wait "$proxy_pid" 2>/dev/null
	fi
	[ -f "$state" ] && "$bin" down --state "$state" >/dev/null 2>&1
	chmod -R u+w "$work" 2>/dev/null
	if [ -z "${CAUSALLAB_DRIVER_SUITE_OUT:-}" ]; then
		find "$work" -mindepth 1 -maxdepth 1 ! -name out -exec rm -rf {} +
	else
		rm -rf "$work"
	fi
}
trap cleanup EXIT

drv_version=$(go list -m -f '{{.Version}}' github.com/go-sql-driver/mysql)
drv_dir=$(go list -m -f '{{.Dir}}' github.com/go-sql-driver/mysql)
if [ -z "$drv_dir" ] || [ ! -d "$drv_dir" ]; then
	go mod download github.com/go-sql-driver/mysql
	drv_dir=$(go list -m -f '{{.Dir}}' github.com/go-sql-driver/mysql)
fi
log "go-sql-driver/mysql $drv_version from $drv_dir"
cp -r "$drv_dir" "$work/driver"
chmod -R u+w "$work/driver"

go build -o "$bin" ./cmd/causallab

free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

log "starting a topology (local backend, 1 primary + 2 replicas)"
"$bin" up --backend local --replicas 2 --state "$state" \
	--set local_infile=ON --set max_allowed_packet=67108864 >"$out/up.txt"
primary=$(jq -r '.nodes[] | select(.role=="primary") | "\(.host):\(.port)"' "$state")
[ -n "$primary" ] || { log "no primary in $state"; exit 1; }

# The suite's database, on the primary (replicated to the replicas).
rootfs=${CAUSALLAB_ROOTFS:-${CAUSALLAB_CACHE:-$HOME/.cache/causallab}/mysql-rootfs}
chroot "$rootfs" mysql -h "${primary%:*}" -P "${primary#*:}" -ucausallab -pcausallab \
	-e 'CREATE DATABASE IF NOT EXISTS gotest' 2>/dev/null

pport=$(free_port)
hport=$(free_port)
"$bin" -v proxy --topology "$state" --listen "127.0.0.1:$pport" --http "127.0.0.1:$hport" \
	--user causallab --password causallab --policy "$policy" ${wmsource:+--watermark-source "$wmsource"} \
	${multiplex:+--multiplex="$multiplex"} >"$out/proxy-server.log" 2>&1 &
proxy_pid=$!
for _ in $(seq 1 100); do
	if (exec 3<>"/dev/tcp/127.0.0.1/$pport") 2>/dev/null; then break; fi
	sleep 0.1
done

# TestConnectorReturnsTimeout dials 1.1.1.1:1234, an address off this machine
# (load tests and suites here stay on loopback); where that address answers,
# the driver's test binary panics and every later test is lost.
skip='^TestConnectorReturnsTimeout$'

run_suite() { # name addr
	local name=$1 addr=$2
	log "running the suite $name ($addr)"
	(cd "$work/driver" &&
		MYSQL_TEST_USER=causallab MYSQL_TEST_PASS=causallab MYSQL_TEST_PROT=tcp MYSQL_TEST_CONCURRENT=1 \
			MYSQL_TEST_ADDR="$addr" MYSQL_TEST_DBNAME=gotest \
			GOFLAGS=-mod=mod go test -count=1 -v -timeout "$timeout" -skip "$skip" ${run_re:+-run "$run_re"} . \
			>"$out/$name.log" 2>&1) || true
	grep -E '^--- (PASS|FAIL|SKIP): ' "$out/$name.log" | awk '{print $3, $2}' | tr -d ':' | sort >"$out/$name.results"
}
run_suite direct "$primary"
run_suite proxy "127.0.0.1:$pport"
# The proxy's counters after the run, beside its log (proxy-server.log).
python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())' \
	"http://127.0.0.1:$hport/metrics" >"$out/proxy-metrics.txt" 2>/dev/null || log "could not read the proxy's metrics"

count() { grep -c " $2\$" "$out/$1.results" || true; }
for n in direct proxy; do
	log "$n: $(count $n PASS) passed, $(count $n FAIL) failed, $(count $n SKIP) skipped"
done

allow=$root/scripts/driver-suite.allow
regress=$(join <(awk '$2=="PASS"{print $1}' "$out/direct.results") \
	<(awk '$2!="PASS"{print $1}' "$out/proxy.results") || true)
# A test that passes directly but is missing from the proxy run (the run
# stopped early) is a regression too.
missing=$(comm -23 <(awk '$2=="PASS"{print $1}' "$out/direct.results") <(awk '{print $1}' "$out/proxy.results"))
unexpected=""
for t in $regress $missing; do
	if [ -f "$allow" ] && grep -qE "^$t[[:space:]]" "$allow"; then
		log "allowed: $t ($(grep -E "^$t[[:space:]]" "$allow" | cut -f2-))"
	else
		unexpected="$unexpected $t"
	fi
done
echo "direct=$(count direct PASS)/$(wc -l <"$out/direct.results") proxy=$(count proxy PASS)/$(wc -l <"$out/proxy.results") logs=$out"
if [ -n "$unexpected" ]; then
	log "passes directly, fails through the proxy:$unexpected"
	exit 1
fi
log "every test that passes directly passes through the proxy (or is listed in $allow)"
