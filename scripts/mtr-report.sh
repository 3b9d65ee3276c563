#!/usr/bin/env bash
# mtr-report.sh OUT: the tables docs/proxy-sessions.md shows from a
# scripts/mtr-suite.sh run's results (OUT/TARGET.results): per target, the
# cases run by status; and, of the cases that pass direct, how many pass
# through each proxy target, with the ones that do not.
set -euo pipefail
out=${1:?usage: mtr-report.sh OUT (a scripts/mtr-suite.sh results directory)}
[ -f "$out/direct.results" ] || { echo "mtr-report: no $out/direct.results" >&2; exit 2; }
printf '| target | cases | pass | fail | skipped | not run |\n'
printf '| --- | ---: | ---: | ---: | ---: | ---: |\n'
for f in "$out"/*.results; do
	t=$(basename "$f" .results)
	awk -v t="$t" '{n++; s[$2]++} $2 ~ /^not-run/ {nr++}
		END {printf "| %s | %d | %d | %d | %d | %d |\n", t, n, s["pass"], s["fail"]+s["error"], s["skipped"], nr}' "$f"
done
echo
pass=$(awk '$2=="pass"{print $1}' "$out/direct.results" | sort)
for f in "$out"/proxy*.results; do
	[ -f "$f" ] || continue
	t=$(basename "$f" .results)
	ran=$(join <(echo "$pass") <(awk '{print $1, $2}' "$f" | sort))
	n=$(echo "$ran" | grep -c . || true)
	k=$(echo "$ran" | awk '$2=="pass"' | grep -c . || true)
	echo "$t: $k of the $n direct passes it ran pass"
	echo "$ran" | awk '$2!="pass" && NF {print "  " $1 " " $2}'
done
