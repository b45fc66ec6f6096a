#!/usr/bin/env bash
# Full extraction, tarmount vs the tools people use for the job, in one run
# (see shared/DESIGN.md, "Performance targets"):
#   tarmount extract URL DIR, cold (no index: one streamed pass that also
#   saves the index) and with the index the cold run saved (parallel spans)
#   vs curl | tar -x (-z, --zstd, lz4 -d |), curl | pigz -d | tar -x
#   (gzip), and aria2c -x8 -s8 then tar -x.
#
# Datasets (made once in $SCRATCH, deterministically):
#   go      a tar of the Go toolchain of this machine (about 270 MB),
#           as .tar.gz (pigz -6), .tar.zst (zstd -3: one frame, which
#           tarmount can only read in one pass), .pzstd.tar.zst (pzstd -3:
#           frames that decode in parallel) and .tar.lz4 (lz4)
#   small   200k files of 1-2 KB in 400 directories, as .tar.gz
# served by scripts/httpserve on 127.0.0.1 shaped like object storage
# (20 ms to first byte, 80 MB/s per connection).
#
# Every tool writes into a fresh directory on the same filesystem; `sync`
# and a drop of the page cache run (untimed) before each timed run so that
# the previous run does not slow the next. The trees are deleted when the
# script exits: on ext4 without a journal, file creation stays slow for
# several minutes after that (a run started 11 minutes after the 5.4
# million inodes of a full run were deleted had its go.tar.gz rows 8-67%
# slower, tarmount's one-pass extraction the most), so leave a quarter of
# an hour between two runs. Tools alternate within each round; the
# table gives the median of RUNS runs (and min-max). Rows of a codec that
# tarmount reports unsupported are skipped for tarmount with a note; the
# peers still run.
#
# Output: a markdown table on stdout and in $OUT/bench-extract.md, every
# run in $OUT/extract-runs.tsv; progress on stderr.
#
#   bash scripts/bench-extract.sh
#   RUNS=3 DATASETS="go.tar.gz small.tar.gz" bash scripts/bench-extract.sh
#
# Environment:
#   RUNS=5
#   SCRATCH=${TMPDIR:-/tmp}/tarmount-bench   datasets and work files
#   OUT=$SCRATCH/out
#   DATASETS="go.tar.gz go.tar.zst go.pzstd.tar.zst go.tar.lz4 small.tar.gz"
#   TARMOUNT_BIN=PATH   use this binary instead of building ./cmd/tarmount
#   EXTRA_ARGS="..."    more flags for tarmount extract (e.g. --write-workers 16)
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."
REPO="$PWD"
. scripts/lib.sh

RUNS="${RUNS:-5}"
SCRATCH="${SCRATCH:-${TMPDIR:-/tmp}/tarmount-bench}"
OUT="${OUT:-$SCRATCH/out}"
DATASETS="${DATASETS:-go.tar.gz go.tar.zst go.pzstd.tar.zst go.tar.lz4 small.tar.gz}"
EXTRA_ARGS="${EXTRA_ARGS:-}"

say() { printf '==> %s\n' "$*" >&2; }
warn() { printf 'bench-extract.sh: warning: %s\n' "$*" >&2; }
die() {
	printf 'bench-extract.sh: FAILED: %s\n' "$*" >&2
	exit 1
}

[[ "$RUNS" =~ ^[1-9][0-9]*$ ]] || die "RUNS=$RUNS is not a positive integer"
mkdir -p "$SCRATCH" "$OUT"
SCRATCH="$(cd "$SCRATCH" && pwd)"
OUT="$(cd "$OUT" && pwd)"
WORK="$(mktemp -d "$SCRATCH/extract.XXXXXX")"
DATA="$SCRATCH/extract-data"
mkdir -p "$DATA"
TSV="$OUT/extract-runs.tsv"
: >"$TSV"
NOTES=()

SERVER_PID=""
SHM_TREE=""
cleanup() {
	local status=$?
	[[ -z "$SHM_TREE" ]] || rm -rf "$SHM_TREE"
	if [[ -n "$SERVER_PID" ]]; then
		kill "$SERVER_PID" 2>/dev/null || true
		wait "$SERVER_PID" 2>/dev/null || true
	fi
	rm -rf "$WORK"
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ------------------------------------------------------------------ tools
for c in curl tar pigz zstd pzstd lz4 gzip; do
	command -v "$c" >/dev/null || die "$c is missing (scripts/deps.sh installs most; zstd and lz4 are Debian packages)"
done
if ! command -v aria2c >/dev/null; then
	say "installing aria2 (aria2c)"
	if ! { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends aria2; } >"$WORK/apt.log" 2>&1; then
		cat "$WORK/apt.log" >&2
		die "could not install aria2"
	fi
fi
if [[ -n "${TARMOUNT_BIN:-}" ]]; then
	BIN="$TARMOUNT_BIN"
else
	BIN="$WORK/tarmount"
	say "building tarmount"
	go build -o "$BIN" ./cmd/tarmount
fi
go build -o "$WORK/httpserve" ./scripts/httpserve

# --------------------------------------------------------------- datasets
make_datasets() {
	if [[ ! -f "$DATA/go.tar" ]]; then
		local goroot
		goroot="$(go env GOROOT)"
		say "making go.tar from $goroot"
		tar -C "$(dirname "$goroot")" -cf "$DATA/go.tar.tmp" "$(basename "$goroot")"
		mv "$DATA/go.tar.tmp" "$DATA/go.tar"
	fi
	[[ -f "$DATA/go.tar.gz" ]] || { pigz -6 -c "$DATA/go.tar" >"$DATA/go.tar.gz.tmp" && mv "$DATA/go.tar.gz.tmp" "$DATA/go.tar.gz"; }
	[[ -f "$DATA/go.tar.zst" ]] || { zstd -q -3 -T0 -c "$DATA/go.tar" >"$DATA/go.tar.zst.tmp" && mv "$DATA/go.tar.zst.tmp" "$DATA/go.tar.zst"; }
	[[ -f "$DATA/go.pzstd.tar.zst" ]] || { pzstd -q -p 2 -3 -c "$DATA/go.tar" >"$DATA/go.pzstd.tar.zst.tmp" && mv "$DATA/go.pzstd.tar.zst.tmp" "$DATA/go.pzstd.tar.zst"; }
	[[ -f "$DATA/go.tar.lz4" ]] || { lz4 -q -c "$DATA/go.tar" >"$DATA/go.tar.lz4.tmp" && mv "$DATA/go.tar.lz4.tmp" "$DATA/go.tar.lz4"; }
	if [[ ! -f "$DATA/small.tar.gz" ]]; then
		say "making small.tar.gz: 200k files"
		# The source tree lives on tmpfs when there is one: deleting
		# 200k files from the filesystem the runs write to would slow
		# every file creation there for minutes (see TRASH below).
		local tree="$WORK/small-src"
		if [[ -d /dev/shm && -w /dev/shm ]]; then
			tree="$(mktemp -d /dev/shm/tarmount-small.XXXXXX)"
			SHM_TREE="$tree"
		fi
		# Deterministic: file i holds its number and 1-2 KB of text
		# drawn from a fixed seed; fixed mtimes and owners in the tar.
		python3 - "$tree" <<'EOF'
import os, random, sys
root = sys.argv[1]
rng = random.Random(42)
words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet",
         "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango"]
for i in range(200000):
    d = os.path.join(root, "d%03d" % (i % 400))
    if i < 400:
        os.makedirs(d, exist_ok=True)
    n = rng.randint(1000, 2000)
    text = []
    size = 0
    while size < n:
        w = rng.choice(words)
        text.append(w)
        size += len(w) + 1
    with open(os.path.join(d, "f%06d.txt" % i), "w") as f:
        f.write("file %d\n" % i + " ".join(text)[:n] + "\n")
EOF
		tar -C "$tree" --sort=name --mtime=@1700000000 --owner=0 --group=0 --numeric-owner -cf - . |
			pigz -6 >"$DATA/small.tar.gz.tmp"
		mv "$DATA/small.tar.gz.tmp" "$DATA/small.tar.gz"
		rm -rf "$tree"
	fi
}
make_datasets

# ----------------------------------------------------------------- server
serve_objstore "$WORK/httpserve" "$DATA" "$WORK/server.log" || die "server did not start: $(cat "$WORK/server.log")"

# ------------------------------------------------------------------- runs
now() { date +%s.%N; }

# settle writes back what earlier runs left dirty and empties the page
# cache (untimed), so that no run pays for the previous one: on this kind
# of machine a full page cache makes file creation several times slower
# (GNU tar -x of the Go tree: 2.0 s after a drop, 7-13 s without).
settle() {
	sync
	echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true
}

# Trees of earlier runs are moved aside, not deleted, until every run is
# over: file creation right after a large deletion is slow here for
# minutes, not seconds (tarmount's one-pass extraction of small.tar.gz:
# 18 s after a fresh rm -rf, 8.6 s without one; after deleting some 70 GB
# of trees, the Go tree's extraction took twice the system time for over
# ten minutes). So the trees stay until the exit (about 4 GB per dataset
# and 3 runs of each tool).
TRASH="$WORK/trash"
trash_n=0

# timed NAME DATASET CMD...: one timed run of CMD (after an untimed sync)
# into a fresh $DEST; appends "dataset tool seconds" to $TSV.
timed() {
	local tool=$1 ds=$2 marker
	shift 2
	marker="$(dirname "$DEST")/.$(basename "$DEST").tarmount"
	mkdir -p "$TRASH"
	trash_n=$((trash_n + 1))
	[[ -e "$DEST" ]] && mv "$DEST" "$TRASH/$trash_n"
	rm -rf "$marker" "$WORK/dl"
	mkdir -p "$DEST" "$WORK/dl"
	settle
	local t0 t1
	t0=$(now)
	if ! "$@" >"$WORK/last.log" 2>&1; then
		warn "$tool on $ds failed: $(tail -3 "$WORK/last.log")"
		return 0
	fi
	t1=$(now)
	printf '%s\t%s\t%s\n' "$ds" "$tool" "$(echo "$t1 - $t0" | bc)" >>"$TSV"
	printf '    %-22s %-16s %6.2f s\n' "$ds" "$tool" "$(echo "$t1 - $t0" | bc)" >&2
}

decomp_of() {
	case "$1" in
	*.gz) echo "gzip -dc" ;;
	*.zst) echo "zstd -dc" ;;
	*.lz4) echo "lz4 -dc" ;;
	esac
}

tm_cold() { # remove the saved index, then extract
	rm -rf "$WORK/cache"
	# shellcheck disable=SC2086
	"$BIN" extract "$BASE/$1" "$DEST" --cache-dir "$WORK/cache" --cache-disk 0 --quiet $EXTRA_ARGS
}
tm_index() { # the saved index of the cold run is there
	# shellcheck disable=SC2086
	"$BIN" extract "$BASE/$1" "$DEST" --cache-dir "$WORK/cache" --cache-disk 0 --quiet $EXTRA_ARGS
}
curl_tar() {
	case "$1" in
	*.gz) curl -sf "$BASE/$1" | tar -xz -C "$DEST" ;;
	*.zst) curl -sf "$BASE/$1" | tar --zstd -x -C "$DEST" ;;
	*.lz4) curl -sf "$BASE/$1" | lz4 -dc | tar -x -C "$DEST" ;;
	esac
}
curl_pigz() { curl -sf "$BASE/$1" | pigz -dc | tar -x -C "$DEST"; }
aria_tar() {
	aria2c -q -x8 -s8 -k1M --allow-overwrite=true -d "$WORK/dl" -o "$1" "$BASE/$1"
	# shellcheck disable=SC2046
	$(decomp_of "$1") "$WORK/dl/$1" | tar -x -C "$DEST"
}

DEST="$WORK/dest"
for ds in $DATASETS; do
	[[ -f "$DATA/$ds" ]] || die "no dataset $ds"
	say "$ds ($(stat -c %s "$DATA/$ds") bytes), $RUNS runs"
	tm=1
	if ! "$BIN" index "$BASE/$ds" --cache-dir "$WORK/probe" --cache-disk 0 >"$WORK/probe.log" 2>&1; then
		if grep -qi 'not supported\|unsupported' "$WORK/probe.log"; then
			NOTES+=("$ds: tarmount on this branch reports the codec unsupported ($(grep -o 'tarmount: .*' "$WORK/probe.log" | head -1)); tarmount rows skipped")
			tm=0
		else
			die "tarmount index $ds: $(tail -3 "$WORK/probe.log")"
		fi
	fi
	rm -rf "$WORK/probe"
	tools=()
	((tm)) && tools+=(tm_cold tm_index)
	tools+=(curl_tar aria_tar)
	[[ "$ds" == *.gz ]] && tools+=(curl_pigz)
	for ((r = 1; r <= RUNS; r++)); do
		# Alternate the order of the peers; the indexed run follows
		# the cold one, whose index it uses.
		order=("${tools[@]}")
		if ((r % 2 == 0)); then
			order=()
			for ((i = ${#tools[@]} - 1; i >= 0; i--)); do order+=("${tools[i]}"); done
			if ((tm)); then # keep cold before index
				order=("${order[@]/tm_cold/}")
				order=("${order[@]/tm_index/}")
				order=(tm_cold tm_index "${order[@]}")
			fi
		fi
		for tool in "${order[@]}"; do
			[[ -n "$tool" ]] || continue
			timed "$tool" "$ds" "$tool" "$ds"
		done
	done
	rm -rf "$WORK/cache"
	[[ -e "$DEST" ]] && mv "$DEST" "$TRASH/$ds.last"
done

# ------------------------------------------------------------------ table
{
	echo "| dataset | tool | median s | min-max s | runs |"
	echo "|---|---|---|---|---|"
	for ds in $DATASETS; do
		for tool in tm_cold tm_index curl_tar curl_pigz aria_tar; do
			vals=$(awk -F'\t' -v d="$ds" -v t="$tool" '$1==d && $2==t {print $3}' "$TSV" | sort -n)
			[[ -n "$vals" ]] || continue
			n=$(echo "$vals" | wc -l)
			med=$(echo "$vals" | awk -v n="$n" 'NR==int((n+1)/2){print}')
			lo=$(echo "$vals" | head -1)
			hi=$(echo "$vals" | tail -1)
			case $tool in
			tm_cold) name="tarmount extract (no index)" ;;
			tm_index) name="tarmount extract (saved index)" ;;
			curl_tar) name="curl \\| tar -x" ;;
			curl_pigz) name="curl \\| pigz -d \\| tar -x" ;;
			aria_tar) name="aria2c -x8 then tar -x" ;;
			esac
			printf '| %s | %s | %.2f | %.2f-%.2f | %d |\n' "$ds" "$name" "$med" "$lo" "$hi" "$n"
		done
	done
	echo
	echo "Ratios of medians (a peer's time / tarmount's; above 1 means tarmount is faster):"
	echo
	echo "| dataset | tarmount | vs curl \\| tar -x | vs best peer | best peer |"
	echo "|---|---|---|---|---|"
	for ds in $DATASETS; do
		med() {
			awk -F'\t' -v d="$ds" -v t="$1" '$1==d && $2==t {print $3}' "$TSV" | sort -n |
				awk '{v[NR]=$1} END{if (NR) print v[int((NR+1)/2)]}'
		}
		ct=$(med curl_tar)
		best="" bestname=""
		for p in curl_tar curl_pigz aria_tar; do
			m=$(med "$p")
			[[ -n "$m" ]] || continue
			if [[ -z "$best" ]] || (($(echo "$m < $best" | bc))); then best=$m bestname=$p; fi
		done
		for tool in tm_cold tm_index; do
			m=$(med "$tool")
			[[ -n "$m" && -n "$best" && -n "$ct" ]] || continue
			printf '| %s | %s | %.2fx | %.2fx | %s |\n' "$ds" "${tool/tm_cold/no index}" "$(echo "$ct / $m" | bc -l)" \
				"$(echo "$best / $m" | bc -l)" "$bestname"
		done
	done | sed 's/| tm_index |/| saved index |/'
	for n in "${NOTES[@]}"; do echo; echo "Note: $n"; done
} | tee "$OUT/bench-extract.md"
