#!/usr/bin/env bash
# tarmount's benchmark suite against its peers, in one command (see
# shared/DESIGN.md, "Performance targets"). It installs what it needs into a
# scratch dir, builds tarmount and the driver scripts/benchsuite, runs every
# scenario with every tool in the same run (alternating their order), and
# draws the chart:
#   1. cold mount-ready without an index: tarmount, ratarmount, and the
#      fastest CLI decoding the whole object (curl | pigz -d, zstd -d, lz4 -d)
#   2. warm mount-ready with a saved index
#   3. cold random reads of 100 small files (p50, p99, bytes fetched)
#   4. sequential read of the largest member (MB/s)
#   5. full extraction: tarmount extract (cold, saved index), --materialize,
#      curl | tar -x, curl | pigz -d | tar -x, curl | rapidgzip -d | tar -x,
#      curl | zstd -d | tar -x, aria2c -x8 -s8 then tar -x; each run on an
#      ext4 of its own; on objstore the report checks the first extraction
#      (no index) against issue 26's ratios: .tar.gz ≤ 0.8x curl |
#      rapidgzip, .tar.zst ≤ 0.8x curl | tar --zstd -x, .tar.lz4 ≤ 0.6x
#      curl | lz4 -d | tar -x
#   6. go version and go build with GOROOT in a lazy mount, a materialized
#      mount, ratarmount and a local tree
#   7. peak RSS of every mount
# and, when asked for (SCENARIOS=progressive, index-pass, boot, upgrade,
# gzip-decode, extract-tmpfs, seq-read-local):
#   8. progressive mount: from the start, when the files at 10%, 50% and
#      90% of the tar stream, `go version` and all of them are usable, and
#      when the index pass ends: a mount without an index (it serves during
#      its pass), one with --wait-index, and curl | tar -x
#   9. index pass to the end: tarmount index URL with an empty cache, and
#      the CLI decoding the whole object
#  10. boot: each tool with an empty cache and a fresh filesystem, the
#      archive on a server of its own shaped like object storage (whatever
#      PROFILES says), once per dataset and codec: tarmount URL MNT
#      --materialize DIR with an index published beside the archive
#      (tarmount index FILE --publish, untimed) and without one, tarmount
#      extract with it, curl | tar -x, aria2c -x8 -s8 then tar -x; from the
#      start, when `go version` run from the tree is done (go dataset), when
#      the tree is fully local, when the last files within the first 1% and
#      10% of the tar stream are readable and (no index) the index pass
#      ended, and the bytes the origin sent; the report checks the design's
#      boot targets with the medians of the run. Not in the default set: at
#      RUNS=3 it adds about 3 minutes for the go dataset's five codecs, 6
#      for small and more for big to a default run of about an hour
#  11. upgrade (go dataset only): DIR holds the go dataset as tarmount
#      extract made it, and tarmount extract of another Go release
#      (go1.27.3, fetched once from the module proxy with GOTOOLCHAIN and
#      archived like the dataset) upgrades it in place, against the same
#      extraction into an empty DIR; both with the two indexes in the
#      cache: time, bytes from the origin, files written
#  12. gzip decode of each dataset's local .tar.gz (from the page cache)
#      to /dev/null: tarmount index FILE with an empty cache against
#      libdeflate-gunzip -c, igzip -dc, rapidgzip -P1 -d -c and gzip -dc;
#      the report checks tarmount ≤ 1.0x libdeflate-gunzip and (the
#      moonshot) igzip
#  13. extraction of the local .tar.gz to tmpfs (a tmpfs mounted for each
#      run of each tool): tarmount extract FILE DIR with a saved index and
#      without, tar -x of the plain .tar (the write floor), pigz -dc | tar
#      -x; the report checks tarmount with the index ≤ 1.5x the floor
#  14. sequential read of the largest member of each dataset's local
#      .tar.gz through a mount with a saved index, whole and in order
#      (MB/s of the member), against gzip -dc of the whole archive to
#      /dev/null (MB/s of its tar); the report checks tarmount ≥ 1.5x
#  15. overlap: the first extraction (no index) against its three jobs,
#      each alone: fetching the object as the first pass fetches it
#      (to nothing), decoding the local copy as the pass decodes it (to
#      nothing), and tarmount extract of the local plain .tar (the
#      writers); each extraction on an ext4 of its own; the report checks
#      the extraction ≤ 1.15x the longest of the three (issue 26), and,
#      for information, ≤ 1.15x the longer of that and the CPU floor (the
#      three's CPU time over the machine's cores)
#  Issue 26's three comparisons in one run, the go dataset (12 and 13 make
#  the .tar.gz of the datasets they run on):
#    DATASETS=go CODECS="gz zst lz4" SCENARIOS="gzip-decode extract-tmpfs extract" \
#      bash scripts/bench-suite.sh
# on the datasets go (this machine's Go toolchain), small (200k files of
# 1-8 KiB) and big (one 2 GiB text file), as .tar, .tar.gz, .tar.zst,
# .seekable.tar.zst (tarmount pack) and .tar.lz4, served on 127.0.0.1 shaped
# like object storage (20 ms, 80 MB/s per connection) or unshaped.
#
# Output in $OUT: runs.jsonl (every run), summary.json, suite.md (the table,
# also on stdout) and suite.png (the chart). Progress on stderr.
#
#   bash scripts/bench-suite.sh           # needs root (apt, FUSE) and /dev/fuse; about an hour
#   QUICK=1 bash scripts/bench-suite.sh   # a few minutes: go and big (256 MiB), gz and zst, 1 run
#
# Old build against new build, in the same run (did a change leave the
# figures unchanged within noise?): BASELINE=REV builds commit REV in a
# temporary git worktree, and both binaries run as two tools of every
# chosen scenario, alternating; the report adds a column "vs old", each
# row's median over the old build's. For example, extraction and cold
# reads of the Go toolchain, gzip, 2 runs, without the peers:
#   BASELINE=HEAD~1 PEERS=0 DATASETS=go CODECS=gz SCENARIOS="extract cold-read" RUNS=2 \
#     bash scripts/bench-suite.sh
#
# Environment (each also a flag of the driver; more driver flags, such as -reads 50, go on the command line):
#   RUNS=3                  runs per scenario and tool
#   DATASETS="go small big"
#   CODECS=""               for every dataset: tar gz zst seekable lz4 bz2 xz
#                           (default: the first five for go, gz for small and big;
#                           bz2 is lbzip2 -9, xz is xz -T2 -6 in blocks of 24 MiB)
#   PROFILES="objstore"     add unshaped for loopback without shaping
#   SCENARIOS="1 2 3 4 5 6"   by number or name: 1 cold-mount, 2 warm-mount,
#                           3 cold-read, 4 seq-read, 5 extract, 6 go-build,
#                           8 progressive, 9 index-pass, 10 boot, 11 upgrade,
#                           12 gzip-decode, 13 extract-tmpfs, 14 seq-read-local,
#                           15 overlap
#   BIG_SIZE=2GiB           size of the big file (SCALE is an alias)
#   GOBUILD_TIMEOUT=5m      a slower go version or go build counts as failed
#   SCRATCH=${TMPDIR:-/tmp}/tarmount-suite   datasets, venv, binaries (kept)
#   OUT=$SCRATCH/out
#   TARMOUNT_BIN=PATH       use this binary instead of building ./cmd/tarmount
#   BASELINE=REV|PATH       also run the tarmount of commit REV (built with git
#                           worktree + go build into $SCRATCH/bin/tarmount-REV),
#                           or the binary PATH, as "old"; this tree's is "new"
#   TARMOUNT="NAME=PATH,NAME=PATH"   the tarmount binaries to compare, the
#                           baseline first (instead of BASELINE; nothing is built)
#   PEERS=1                 0 runs tarmount's rows alone (no ratarmount, CLI
#                           decoders, curl | tar, aria2c or local tree)
#   RATARMOUNT=1            0 leaves ratarmount out (its rows say so)
#   KEEP=1                  keep the work dir (logs, caches)
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."
REPO="$PWD"

say() { printf '==> %s\n' "$*" >&2; }
warn() { printf 'bench-suite.sh: warning: %s\n' "$*" >&2; }
die() {
	printf 'bench-suite.sh: FAILED: %s\n' "$*" >&2
	exit 1
}

if [[ "${QUICK:-0}" == 1 ]]; then
	: "${RUNS:=1}" "${DATASETS:=go big}" "${CODECS:=gz zst}" "${PROFILES:=objstore}" "${BIG_SIZE:=256MiB}"
	: "${GOBUILD_TIMEOUT:=2m}"
fi
RUNS="${RUNS:-3}"
DATASETS="${DATASETS:-go small big}"
CODECS="${CODECS:-}"
PROFILES="${PROFILES:-objstore}"
SCENARIOS="${SCENARIOS:-1 2 3 4 5 6}"
BIG_SIZE="${BIG_SIZE:-${SCALE:-2GiB}}"
SCRATCH="${SCRATCH:-${TMPDIR:-/tmp}/tarmount-suite}"
RATARMOUNT="${RATARMOUNT:-1}"
PEERS="${PEERS:-1}"
[[ -z "${BASELINE:-}" || -z "${TARMOUNT:-}" ]] || die "set BASELINE or TARMOUNT, not both"
[[ "$PEERS" != 0 ]] || RATARMOUNT=0

[[ "$RUNS" =~ ^[1-9][0-9]*$ ]] || die "RUNS=$RUNS is not a positive integer"
[[ "$SCRATCH" != *[[:space:]]* ]] || die "SCRATCH=$SCRATCH must not contain spaces"
mkdir -p "$SCRATCH"
SCRATCH="$(cd "$SCRATCH" && pwd)"
OUT="${OUT:-$SCRATCH/out}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
BIN="$SCRATCH/bin"
mkdir -p "$BIN"

# The driver runs in the background so that a signal to this script is
# passed on at once; the driver stops its own processes and mounts.
DRIVER_PID=""
on_signal() {
	[[ -z "$DRIVER_PID" ]] || kill -TERM "$DRIVER_PID" 2>/dev/null || true
}
trap 'on_signal; exit 130' INT
trap 'on_signal; exit 143' TERM

# ---------------------------------------------------------------- tools

# apt_install PKG...: install Debian packages (root only), logged.
apt_install() {
	((EUID == 0)) || {
		warn "need root to install $*"
		return 1
	}
	command -v apt-get >/dev/null || {
		warn "apt-get not found; install $* by hand"
		return 1
	}
	say "installing $* with apt-get"
	local log="$SCRATCH/apt.log"
	if ! timeout 600 apt-get update -q >"$log" 2>&1 ||
		! DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -q --no-install-recommends "$@" >>"$log" 2>&1; then
		tail -5 "$log" >&2
		return 1
	fi
}

say "checking tools"
command -v go >/dev/null || die "go not found in PATH"
[[ -e /dev/fuse ]] || die "/dev/fuse is missing: FUSE mounts are impossible here"
declare -A pkg_of=([curl]=curl [pigz]=pigz [zstd]=zstd [lz4]=lz4 [tar]=tar [fusermount3]=fuse3 [python3]=python3)
missing=()
for c in "${!pkg_of[@]}"; do
	command -v "$c" >/dev/null 2>&1 || missing+=("${pkg_of[$c]}")
done
if ((${#missing[@]})); then
	apt_install "${missing[@]}" || die "could not install ${missing[*]}"
fi
# Peers from Debian (aria2c; libdeflate-gunzip and igzip, the gzip
# decoders of scenario 12): without one, its rows say n/a.
if [[ "$PEERS" != 0 ]]; then
	declare -A peer_pkg=([aria2c]=aria2 [libdeflate-gunzip]=libdeflate-tools [igzip]=isal)
	missing=()
	for c in "${!peer_pkg[@]}"; do
		command -v "$c" >/dev/null 2>&1 || missing+=("${peer_pkg[$c]}")
	done
	if ((${#missing[@]})) && ! apt_install "${missing[@]}"; then
		for c in "${!peer_pkg[@]}"; do
			command -v "$c" >/dev/null 2>&1 || apt_install "${peer_pkg[$c]}" || warn "$c is missing; its rows will say n/a"
		done
	fi
fi

# A venv in the scratch dir (kept between runs): ratarmount (which brings
# rapidgzip) and matplotlib for the chart.
VENV="$SCRATCH/venv"
RATAR_NOTE="not installed (RATARMOUNT=0)"
if [[ ! -x "$VENV/bin/python" ]]; then
	python3 -c 'import venv, ensurepip' 2>/dev/null || apt_install python3-venv || true
	say "making a python venv in $VENV"
	python3 -m venv "$VENV" >"$SCRATCH/venv.log" 2>&1 || warn "python3 -m venv failed: $(tail -1 "$SCRATCH/venv.log")"
fi
pip_install() {
	[[ -x "$VENV/bin/pip" ]] || return 1
	say "pip install $* (into $VENV)"
	timeout 900 "$VENV/bin/pip" install -q "$@" >"$SCRATCH/pip.log" 2>&1
}
if [[ "$RATARMOUNT" != 0 ]]; then
	if ! "$VENV/bin/ratarmount" --version >/dev/null 2>&1; then
		pip_install ratarmount fsspec aiohttp requests ||
			warn "pip install ratarmount failed: $(grep -v '^\s*$' "$SCRATCH/pip.log" | tail -1)"
	fi
	if "$VENV/bin/ratarmount" --version >/dev/null 2>&1; then
		RATAR_NOTE=""
	else
		RATAR_NOTE="failed to install (pip install ratarmount; see $SCRATCH/pip.log)"
	fi
fi
if [[ "$PEERS" != 0 ]] && ! "$VENV/bin/python" -c 'import matplotlib' 2>/dev/null; then
	pip_install matplotlib || warn "pip install matplotlib failed: no chart"
fi

RATAR_ARGS=(-ratarmount "" -ratarmount-note "$RATAR_NOTE")
RATAR_VERSION="not installed"
if [[ -z "$RATAR_NOTE" ]]; then
	RATAR_ARGS=(-ratarmount "$VENV/bin/ratarmount")
	RATAR_VERSION="$("$VENV/bin/ratarmount" --version 2>/dev/null | awk '$1 == "ratarmount" || $1 == "rapidgzip" || $1 == "indexed_zstd" || $1 == "indexed_gzip" || $1 == "fsspec" { printf "%s%s %s", sep, $1, $2; sep = ", " }')"
fi
# rapidgzip comes with ratarmount; without it (RATARMOUNT=0, or a failed
# install), on its own.
if [[ "$PEERS" != 0 && ! -x "$VENV/bin/rapidgzip" ]]; then
	pip_install rapidgzip || warn "pip install rapidgzip failed: $(grep -v '^\s*$' "$SCRATCH/pip.log" | tail -1)"
fi
RAPIDGZIP=""
[[ -x "$VENV/bin/rapidgzip" ]] && RAPIDGZIP="$VENV/bin/rapidgzip"

# build_rev REV OUT: build cmd/tarmount of commit REV into OUT, in a
# temporary worktree of this repository (removed afterwards).
build_rev() {
	local rev src
	rev="$(git -C "$REPO" rev-parse --short "$1^{commit}")" || die "BASELINE=$1 is not a commit"
	src="$SCRATCH/src-$rev"
	say "building tarmount of $rev (git worktree add $src; go build)"
	git -C "$REPO" worktree remove --force "$src" 2>/dev/null || rm -rf "$src"
	git -C "$REPO" worktree add --quiet --detach "$src" "$rev" || die "git worktree add $src $rev failed"
	local status=0
	(cd "$src" && timeout 600 go build -o "$2" ./cmd/tarmount) || status=$?
	git -C "$REPO" worktree remove --force "$src"
	((status == 0)) || die "go build ./cmd/tarmount of $rev failed"
}

say "building tarmount and the driver into $BIN"
if [[ -n "${TARMOUNT:-}" ]]; then
	COMMIT="the builds of TARMOUNT ($(echo "$TARMOUNT" | sed -E 's/=[^,]*//g'))"
elif [[ -n "${TARMOUNT_BIN:-}" ]]; then
	[[ -x "$TARMOUNT_BIN" ]] || die "TARMOUNT_BIN=$TARMOUNT_BIN is not executable"
	cp "$TARMOUNT_BIN" "$BIN/tarmount"
	COMMIT="binary from TARMOUNT_BIN"
else
	timeout 600 go build -o "$BIN/tarmount" ./cmd/tarmount ||
		die "go build ./cmd/tarmount failed (set TARMOUNT_BIN to a built binary)"
	COMMIT="$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)"
	[[ -z "$(git -C "$REPO" status --porcelain 2>/dev/null | grep -v '^??' || true)" ]] || COMMIT+=" + uncommitted changes"
fi
timeout 600 go build -o "$BIN/benchsuite" ./scripts/benchsuite || die "go build ./scripts/benchsuite failed"
TARMOUNT="${TARMOUNT:-$BIN/tarmount}"
if [[ -n "${BASELINE:-}" ]]; then
	if [[ -f "$BASELINE" && -x "$BASELINE" ]]; then
		old="$BASELINE"
		COMMIT="old: the binary BASELINE, new: $COMMIT"
	else
		old="$BIN/tarmount-$(git -C "$REPO" rev-parse --short "$BASELINE^{commit}" 2>/dev/null || echo "$BASELINE")"
		build_rev "$BASELINE" "$old"
		COMMIT="old: $(basename "$old" | sed 's/^tarmount-//'), new: $COMMIT"
	fi
	TARMOUNT="old=$old,new=$BIN/tarmount"
fi

TOOLS="$(go version | cut -d' ' -f3), tarmount $COMMIT, ratarmount: $RATAR_VERSION"
TOOLS+=", $(curl --version | head -1 | cut -d' ' -f1-2), pigz $(pigz --version 2>&1 | cut -d' ' -f2)"
TOOLS+=", zstd $(zstd -V | grep -o 'v[0-9.]*' | head -1), lz4 $(lz4 -V 2>&1 | grep -o 'v[0-9.]*' | head -1)"
TOOLS+=", $(tar --version | head -1)"
command -v aria2c >/dev/null && TOOLS+=", $(aria2c --version | head -1)"
command -v libdeflate-gunzip >/dev/null && TOOLS+=", libdeflate-gunzip $(libdeflate-gunzip -V 2>&1 | grep -o 'v[0-9.]*' | head -1)"
command -v igzip >/dev/null && TOOLS+=", igzip $(igzip -V 2>&1 | grep -o '[0-9][0-9.]*' | head -1)"
[[ -z "$RAPIDGZIP" ]] || TOOLS+=", rapidgzip $("$RAPIDGZIP" --version 2>&1 | grep -o '[0-9][0-9.]*' | head -1)"
TOOLS+=", $(gzip --version | head -1)"

# ---------------------------------------------------------------- run

list() { echo "$*" | tr ' ' ','; }
# The command that remakes this report, for its header.
CMDLINE="RUNS=$RUNS DATASETS=\"$DATASETS\" CODECS=\"$CODECS\" PROFILES=\"$PROFILES\" SCENARIOS=\"$SCENARIOS\" BIG_SIZE=$BIG_SIZE"
[[ -z "${BASELINE:-}" ]] || CMDLINE+=" BASELINE=$BASELINE"
[[ "$PEERS" != 0 ]] || CMDLINE+=" PEERS=0"
CMDLINE+=" bash scripts/bench-suite.sh${*:+ $*}"
args=(-scratch "$SCRATCH" -out "$OUT" -tarmount "$TARMOUNT" "${RATAR_ARGS[@]}" -rapidgzip "$RAPIDGZIP"
	-peers="$([[ "$PEERS" == 0 ]] && echo false || echo true)" -runs "$RUNS" -datasets "$(list "$DATASETS")" -profiles "$(list "$PROFILES")"
	-scenarios "$(list "$SCENARIOS")" -big-size "$BIG_SIZE" -gobuild-timeout "${GOBUILD_TIMEOUT:-5m}"
	-meta "command=$CMDLINE;tools=$TOOLS")
[[ -z "$CODECS" ]] || args+=(-codecs "$(list "$CODECS")")
[[ "${KEEP:-0}" != 1 ]] || args+=(-keep)
say "running the suite: ${args[*]:2} $*"
"$BIN/benchsuite" "${args[@]}" "$@" &
DRIVER_PID=$!
status=0
wait "$DRIVER_PID" || status=$?
DRIVER_PID=""
((status == 0)) || die "the driver failed (exit $status)"

if [[ "$PEERS" == 0 ]]; then
	: # a comparison of builds: the table says it all
elif "$VENV/bin/python" -c 'import matplotlib' 2>/dev/null; then
	"$VENV/bin/python" scripts/bench-chart.py "$OUT/summary.json" "$OUT/suite.png" || warn "the chart failed"
else
	warn "matplotlib is missing: no chart"
fi
say "wrote $OUT/suite.md, $OUT/summary.json, $OUT/runs.jsonl and $OUT/suite.png"
