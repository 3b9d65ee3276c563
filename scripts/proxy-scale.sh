#!/bin/sh
# proxy-scale.sh runs the proxy's scale harness (proxy/scale_test.go,
# TestScale): CLIENTS client connections (default 2000) through one proxy
# on a local MySQL topology (a primary and two replicas on loopback), each
# a lab session doing point reads and one write in ten, judged against the
# lab's ground truth. It prints refusals, read-your-writes and
# monotonic-reads violations (each with the node and reason of the
# session's last reads), backend connections per node as the servers count
# them (with CAUSALLAB_PROXY_SCALE_MULTIPLEX=1 the test fails when a node's
# count passes the proxy's stated bound, pool_size + its own connections),
# the pools' hold, wait and reset times, and the proxy's heap per idle
# client.
#
#   scripts/proxy-scale.sh [clients] [seconds]
#
# Every CAUSALLAB_PROXY_SCALE_* knob TestScale documents passes through
# (policy, watermark, per-client rate, servers' max_connections, a heap
# profile, the backend connection limit to enforce). With
# CAUSALLAB_PROXY_SCALE_TASKSET=P:R (e.g. 0:1) the whole test, and so the
# servers it starts, runs on CPU list R, and the test then pins the proxy
# (its own process) to P and starts the clients on R.
set -eu
cd "$(dirname "$0")/.."
export CAUSALLAB_PROXY_SCALE=1
export CAUSALLAB_PROXY_SCALE_CLIENTS="${1:-${CAUSALLAB_PROXY_SCALE_CLIENTS:-2000}}"
export CAUSALLAB_PROXY_SCALE_SECONDS="${2:-${CAUSALLAB_PROXY_SCALE_SECONDS:-60}}"
export TESTCONTAINERS_RYUK_DISABLED=true
pin=""
if [ -n "${CAUSALLAB_PROXY_SCALE_TASKSET:-}" ]; then
	pin="taskset -c ${CAUSALLAB_PROXY_SCALE_TASKSET#*:}"
fi
exec $pin ${GO:-go} test -count=1 -timeout 30m -run '^TestScale$' -v ./proxy/
