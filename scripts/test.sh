#!/usr/bin/env bash
# The test command (README and .ci/run call exactly this):
#   installs what is missing (scripts/deps.sh), detaches leftover test mounts,
#   runs go vet and the whole test suite under the race detector, the memory
#   budgets and the GNU tar comparisons without it, every benchmark once, fuzzes the
#   gzip and tar decoders, the zstd, lz4, bzip2 and xz walkers, the index decoder,
#   random access through an index and the span decoders on damaged archives
#   briefly, detaches leftovers again, and exits non-zero if anything failed.
#
# Test mounts are recognised by their filesystem type: tests mount with
# MountOptions.Name = "tarmount-test", which /proc/mounts shows as
# "fuse.tarmount-test". Nothing else is touched. On CI (CI=true) or with
# TARMOUNT_DETACH_ALL=1 every such mount is detached; otherwise only the dead
# ones (the mountpoint does not answer stat within 10 s), so that test runs of
# other sessions on a shared machine keep their live mounts.
#
# Extra arguments go to go test, e.g. bash scripts/test.sh -run TestMount -v
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/deps.sh

test_fstype="fuse.tarmount-test"

detach_all=0
if [[ "${CI:-}" == "true" || "${TARMOUNT_DETACH_ALL:-}" == "1" ]]; then
	detach_all=1
fi

# detach_leftovers lazily unmounts leftover mounts of type $test_fstype,
# deepest first.
detach_leftovers() {
	[[ -r /proc/mounts ]] || return 0
	local -a mnts=()
	local src mnt fstype rest
	while read -r src mnt fstype rest; do
		if [[ "$fstype" == "$test_fstype" ]]; then
			# /proc/mounts escapes space, tab, newline and backslash as \ooo.
			mnts+=("$(printf '%b' "$mnt")")
		fi
	done </proc/mounts
	local i
	for ((i = ${#mnts[@]} - 1; i >= 0; i--)); do
		mnt="${mnts[i]}"
		if ((!detach_all)) && timeout 10 stat -- "$mnt" >/dev/null 2>&1; then
			continue # alive: another run's mount
		fi
		echo "test.sh: detaching leftover test mount $mnt" >&2
		fusermount3 -u -z "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null ||
			echo "test.sh: could not detach $mnt" >&2
	done
}

detach_leftovers
trap detach_leftovers EXIT

go vet ./...

# Tests run with -json through scripts/testsummary: the log shows what go
# test shows (results, failures), then every skipped test with its reason,
# so that each run says how many skipped (under CI=true a missing
# prerequisite fails instead).
summary="$(mktemp -d)/testsummary"
go build -o "$summary" ./scripts/testsummary
gotest() {
	go test -json "$@" | "$summary"
	return "${PIPESTATUS[0]}"
}

status=0
# The comparisons with GNU tar and bsdtar (Go's testdata and the crafted
# archives: thousands of runs of the binary, which a race build slows
# fivefold) run in the second run, without the race detector: they check
# what the commands make of archives, and the mount tests above check the
# same code under it.
gnu='^(TestGoTarTestdata|TestGNUCrafted|TestGNUWarnings)$'
if [[ $# -eq 0 ]]; then
	gotest -race -count=1 -timeout 40m -skip "$gnu" ./... || status=$?
else
	gotest -race -count=1 -timeout 40m "$@" ./... || status=$?
fi

# The race detector multiplies memory use and time, so the memory budgets
# (the budget test's, which skips itself under it, the stress load's peak
# and the hostile archives' RSS cap, which are loose under it) and the
# hostile deep trees (which TestExtractHostile skips under it) run again
# without it, with the GNU tar comparisons. Then every Go benchmark runs
# once, so that none rots.
if [[ $# -eq 0 ]]; then
	gotest -count=1 -timeout 15m -run '^(TestMemoryBudget|TestStress|TestHostileArchives)$' ./tests || status=$?
	gotest -count=1 -timeout 15m -run "$gnu" ./tests || status=$?
	gotest -count=1 -timeout 10m -run '^TestExtractHostile$' ./materialize || status=$?
	gotest -count=1 -timeout 15m -run '^$' -bench . -benchtime=1x ./... || status=$?
fi

# A short fuzzing run of the decoders that read hostile input (their seed
# corpora already ran above as ordinary tests): scripts/fuzz.sh, which
# also makes the long runs. FUZZTIME=0 skips it; a crasher lands in the
# package's testdata/fuzz and fails the run.
fuzztime="${FUZZTIME:-20s}"
if [[ $# -eq 0 && "$fuzztime" != "0" ]]; then
	# The frame walkers and the index targets get half the time each
	# (FUZZTIME=20s: 10 s).
	walkertime="$fuzztime"
	if [[ "$fuzztime" =~ ^([0-9]+)s$ ]]; then
		walkertime="$(((${BASH_REMATCH[1]} + 1) / 2))s"
	fi
	FUZZTIME="$fuzztime" bash scripts/fuzz.sh FuzzInflate FuzzScan || status=1
	FUZZTIME="$walkertime" bash scripts/fuzz.sh FuzzZstdFrames FuzzLZ4Frames FuzzBzip2Blocks FuzzXzBlocks \
		FuzzUnmarshal FuzzRandomAccess FuzzCorruptSpans FuzzParallel FuzzZstdWalk || status=1
fi
exit "$status"
