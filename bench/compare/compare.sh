#!/usr/bin/env bash
# compare.sh builds the benchmarks of one package in two trees, the git ref REF (checked
# out in a git worktree in a mktemp folder) and the current tree, runs the two binaries
# alternated in ROUNDS rounds in one run (the side that goes first swaps every round, so
# that neither always meets a warmer machine), and prints, per benchmark and per metric,
# each side's median and the ratio current/REF. See docs/benchmarks.md.
#
#	bench/compare/compare.sh REF [ROUNDS]
#	make bench-compare REF=main ROUNDS=4 PKG=bench BENCH=NoopThroughput
#
# Environment (each optional):
#	PKG        the package's folder, from the repository's root (default: bench, the
#	           module that runs fleet-host beside asynq)
#	BENCH      the -test.bench pattern (default: NoopThroughput)
#	BENCHTIME  the -test.benchtime of each round (default: 1x)
#	ARGS       more flags for the test binaries, e.g. "-tasks=10000"
#	GO         the go command (default: go)
set -euo pipefail

usage() { echo "usage: $0 REF [ROUNDS]   (env: PKG, BENCH, BENCHTIME, ARGS)" >&2; exit 2; }
[ $# -ge 1 ] && [ -n "$1" ] || usage
REF=$1
ROUNDS=${2:-${ROUNDS:-4}}
PKG=${PKG:-bench}
BENCH=${BENCH:-NoopThroughput}
BENCHTIME=${BENCHTIME:-1x}
ARGS=${ARGS:-}
GO=${GO:-go}
case $ROUNDS in '' | *[!0-9]* | 0) echo "compare: ROUNDS=$ROUNDS: want a whole number of rounds, at least 1" >&2; exit 2 ;; esac

root=$(git rev-parse --show-toplevel)
[ -d "$root/$PKG" ] || { echo "compare: PKG=$PKG: no such folder in $root" >&2; exit 2; }
sha=$(git -C "$root" rev-parse --verify --quiet "$REF^{commit}") || { echo "compare: REF=$REF: not a commit in $root" >&2; exit 2; }

work=$(mktemp -d)
cleanup() {
	git -C "$root" worktree remove --force "$work/ref" >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT
git -C "$root" worktree add --detach --quiet "$work/ref" "$sha"
[ -d "$work/ref/$PKG" ] || { echo "compare: PKG=$PKG: not in $REF" >&2; exit 2; }

echo "compare: building $PKG at $REF (${sha:0:10}) and in the current tree" >&2
"$GO" -C "$work/ref/$PKG" test -c -o "$work/ref.test" .
"$GO" -C "$root/$PKG" test -c -o "$work/cur.test" .

# run SIDE: one round of SIDE's binary, from its package's folder (as go test runs it:
# the benchmarks find the repository's plugins from there), each line tagged with SIDE.
run() {
	local side=$1 dir
	if [ "$side" = ref ]; then dir="$work/ref/$PKG"; else dir="$root/$PKG"; fi
	# shellcheck disable=SC2086 # ARGS is a list of flags
	(cd "$dir" && "$work/$side.test" -test.run '^$' -test.bench "$BENCH" -test.benchtime "$BENCHTIME" $ARGS) |
		tee -a "$work/$side.log" | grep '^Benchmark' | sed "s/^/$side /" >>"$work/all" || true
}
for ((i = 0; i < ROUNDS; i++)); do
	echo "compare: round $((i + 1)) of $ROUNDS" >&2
	if ((i % 2 == 0)); then run ref; run cur; else run cur; run ref; fi
done
[ -s "$work/all" ] || { echo "compare: no benchmark matched BENCH=$BENCH; the runs said:" >&2; cat "$work"/*.log >&2; exit 1; }

echo
echo "$PKG, -bench $BENCH, $ROUNDS rounds alternated; medians; ratio = current / $REF"
awk '
	{
		side = $1; name = $2; sub(/-[0-9]+$/, "", name)
		for (i = 4; i + 1 <= NF; i += 2) {
			key = name SUBSEP $(i + 1)
			if (!(key in seen)) { seen[key] = 1; order[++n] = key }
			v[key, side, ++c[key, side]] = $i
		}
	}
	function median(key, side,    m, i, j, t, a) {
		m = c[key, side]
		if (m == 0) return ""
		for (i = 1; i <= m; i++) a[i] = v[key, side, i] + 0
		for (i = 2; i <= m; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
		return m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
	}
	END {
		printf "%-48s %-18s %14s %14s %8s\n", "benchmark", "unit", "ref", "current", "cur/ref"
		for (k = 1; k <= n; k++) {
			split(order[k], p, SUBSEP)
			r = median(order[k], "ref"); q = median(order[k], "cur")
			ratio = (r != "" && q != "" && r != 0) ? sprintf("%.3f", q / r) : "-"
			printf "%-48s %-18s %14s %14s %8s\n", p[1], p[2], r == "" ? "-" : sprintf("%.4g", r), q == "" ? "-" : sprintf("%.4g", q), ratio
		}
	}' "$work/all"
