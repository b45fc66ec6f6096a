#!/usr/bin/env bash
# Fuzzes the code that reads hostile input: the inflater, the tar scanner,
# every codec's frame or block walker, the index decoder, and the
# checkpointed random-access reader (intact and with damaged spans).
#
#   bash scripts/fuzz.sh                     # every target for FUZZTIME (20s)
#   FUZZTIME=10m JOBS=2 bash scripts/fuzz.sh # the long run: two targets at a time
#   bash scripts/fuzz.sh FuzzScan FuzzInflate
#
# Environment:
#   FUZZTIME=20s  per target (go test -fuzztime)
#   JOBS=1        targets fuzzed at once; each gets nproc/JOBS workers
#   LOGS=DIR      keep each target's output in DIR/TARGET.log (default: a
#                 scratch dir, removed at exit unless a target failed)
#
# A crasher lands in the package's testdata/fuzz (commit it: it becomes a
# regression seed that every `go test` runs) and fails the run. A target
# that stops without one fails the run too, never retried: Go's coordinator
# ends so ("context deadline exceeded") when a worker is still busy with
# one input at the deadline, which is a hang or an input too slow to
# decode, and the log (kept) shows how far it got. At the end each
# target's line gives how long it ran and how many inputs it tried.
set -uo pipefail
cd "$(dirname "$0")/.."

# target:package, the names test.sh uses.
all=(FuzzInflate:./index/inflate FuzzScan:./index/tarscan FuzzZstdFrames:./index FuzzLZ4Frames:./index
	FuzzBzip2Blocks:./index FuzzXzBlocks:./index FuzzUnmarshal:./index FuzzRandomAccess:./index
	FuzzCorruptSpans:./index FuzzParallel:./index/inflate FuzzZstdWalk:./index)

fuzztime="${FUZZTIME:-20s}"
jobs="${JOBS:-1}"
workers=$(($(nproc) / jobs))
((workers < 1)) && workers=1

targets=()
if [[ $# -eq 0 ]]; then
	targets=("${all[@]}")
else
	for name in "$@"; do
		found=""
		for t in "${all[@]}"; do
			[[ "${t%%:*}" == "$name" ]] && found="$t"
		done
		[[ -n "$found" ]] || {
			echo "fuzz.sh: no target $name (have: ${all[*]%%:*})" >&2
			exit 2
		}
		targets+=("$found")
	done
fi

logs="${LOGS:-}"
if [[ -z "$logs" ]]; then
	logs="$(mktemp -d "${TMPDIR:-/tmp}/tarmount-fuzz.XXXXXX")"
	trap '[[ -e "$logs/failed" ]] || rm -rf "$logs"' EXIT
fi
mkdir -p "$logs"

# fuzz TARGET:PKG runs one target and prints its summary line.
fuzz() {
	local name="${1%%:*}" pkg="${1#*:}" log="$logs/${1%%:*}.log" start rc
	start=$(date +%s)
	# Go's minimizer is quadratic on inputs of kilobytes: cap it, or a
	# short run spends its time minimizing instead of fuzzing.
	run() {
		go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" -fuzzminimizetime 1s \
			-parallel "$workers" "$pkg" >>"$log" 2>&1
	}
	run
	rc=$?
	if ((rc != 0)) && [[ -z "$(git status --porcelain -- "$pkg/testdata/fuzz" 2>/dev/null)" ]]; then
		echo "fuzz.sh: $name stopped without a crasher: a hang or an input too slow (failed, not retried)" >>"$log"
	fi
	local last
	last=$(grep -o 'elapsed: [^,]*, execs: [0-9]*' "$log" | tail -1)
	if ((rc == 0)); then
		echo "fuzz.sh: $name ok: ran $(($(date +%s) - start)) s, last progress line: ${last:-none}"
	else
		touch "$logs/failed"
		echo "fuzz.sh: $name FAILED after $(($(date +%s) - start)) s (log: $log):"
		tail -20 "$log" | sed 's/^/    /'
	fi
	return "$rc"
}

status=0
pids=()
for t in "${targets[@]}"; do
	echo "fuzz.sh: fuzzing ${t%%:*} for $fuzztime with $workers workers" >&2
	fuzz "$t" &
	pids+=($!)
	if ((${#pids[@]} >= jobs)); then
		wait "${pids[0]}" || status=1
		pids=("${pids[@]:1}")
	fi
done
for p in "${pids[@]}"; do
	wait "$p" || status=1
done
if [[ -n "$(git status --porcelain -- index 2>/dev/null | grep testdata/fuzz)" ]]; then
	echo "fuzz.sh: new crashers under testdata/fuzz: commit them as regression seeds" >&2
	status=1
fi
exit "$status"
