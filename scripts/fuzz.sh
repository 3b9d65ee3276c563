#!/bin/sh
# fuzz.sh runs Go fuzz targets for a wall-clock budget each, without the
# wall-clock -fuzztime that Go 1.26's fuzz coordinator races: a duration
# budget can end a clean run with a bare "context deadline exceeded" (no
# failing input written) when a starved worker misses the stop deadline,
# which is what failed FuzzParseToken once on a loaded machine. Each target
# runs instead in rounds of an execution-count budget (-fuzztime Nx, no
# deadline to race) until the budget has passed; the corpus Go caches
# between rounds carries the progress over.
#
#   scripts/fuzz.sh [budget-seconds] [package-pattern] [target-regexp]
#
# Defaults: 300 s per target, ./..., every Fuzz* function. A failing input
# is a failure (Go writes it under testdata/fuzz/<target>/); the exit status
# is that of the first failing round. One line per target on stdout:
# package, target, rounds, executions asked, seconds, result.
set -eu
budget=${1:-300}
pattern=${2:-./...}
only=${3:-.}
round=${FUZZ_ROUND_EXECS:-200000}
go=${GO:-go}
status=0
for pkg in $($go list "$pattern"); do
	dir=$($go list -f '{{.Dir}}' "$pkg")
	targets=$(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u | grep -E "$only" || true)
	for t in $targets; do
		start=$(date +%s)
		n=0
		result=ok
		while :; do
			n=$((n + 1))
			if ! out=$($go test -run '^$' -fuzz "^$t\$" -fuzztime "${round}x" "$pkg" 2>&1); then
				result=FAIL
				printf '%s\n' "$out" >&2
				[ "$status" -ne 0 ] || status=1
				break
			fi
			[ $(($(date +%s) - start)) -lt "$budget" ] || break
		done
		printf '%s %s rounds=%d execs=%d seconds=%d %s\n' "$pkg" "$t" "$n" $((n * round)) $(($(date +%s) - start)) "$result"
	done
done
exit $status
