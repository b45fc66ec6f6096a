#!/usr/bin/env bash
# Progressive mount: how soon files are usable when a machine starts from a
# remote tarball with no index yet (see shared/DESIGN.md; issue: the tree
# is usable while the first index pass is still running). From the start
# of each tool, the time until:
#   10%, 50%, 90%   the first byte of the file at that point of the tar
#                   stream (the file that holds it),
#   go version      GOROOT/bin/go version, run from the tree, completes,
#   all             every one of those is done,
# for three ways to get there, alternating in each round:
#   tarmount           tarmount URL MNT (no index: serves while it indexes)
#   tarmount --wait-index   the same mount, ready only after the index pass
#   curl | tar -xz     download and extract, then read
# The probes start together with the tool and retry until they succeed
# (as services started at boot would). Dataset: the Go toolchain of this
# machine as .tar.gz (pigz -6), served by scripts/httpserve on 127.0.0.1
# shaped like object storage (20 ms to first byte, 80 MB/s per
# connection). Medians of RUNS runs, and min-max; the tarmount rows also
# give when the index pass ended.
#
#   bash scripts/bench-progressive.sh       # needs root and /dev/fuse
#   RUNS=3 bash scripts/bench-progressive.sh
#
# Environment: RUNS=5, SCRATCH=${TMPDIR:-/tmp}/tarmount-bench (dataset,
# shared with bench-extract.sh), OUT=$SCRATCH/out, TARMOUNT_BIN=PATH.
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."
. scripts/lib.sh

RUNS="${RUNS:-5}"
SCRATCH="${SCRATCH:-${TMPDIR:-/tmp}/tarmount-bench}"
OUT="${OUT:-$SCRATCH/out}"
say() { printf '==> %s\n' "$*" >&2; }
die() {
	printf 'bench-progressive.sh: FAILED: %s\n' "$*" >&2
	exit 1
}
[[ "$RUNS" =~ ^[1-9][0-9]*$ ]] || die "RUNS=$RUNS is not a positive integer"
for c in curl tar pigz python3; do
	command -v "$c" >/dev/null || die "$c is missing (scripts/deps.sh installs it)"
done
mkdir -p "$SCRATCH/extract-data" "$OUT"
SCRATCH="$(cd "$SCRATCH" && pwd)"
OUT="$(cd "$OUT" && pwd)"
DATA="$SCRATCH/extract-data"
WORK="$(mktemp -d "$SCRATCH/progressive.XXXXXX")"
TSV="$OUT/progressive-runs.tsv"
: >"$TSV"

SERVER_PID="" MOUNT_PID="" MNT=""
cleanup() {
	local status=$?
	if [[ -n "$MOUNT_PID" ]]; then
		kill "$MOUNT_PID" 2>/dev/null || true
		wait_pid "$MOUNT_PID" 30 || kill -9 "$MOUNT_PID" 2>/dev/null || true
	fi
	if [[ -n "$MNT" ]] && is_mounted "$MNT"; then umount -l "$MNT" || true; fi
	if [[ -n "$SERVER_PID" ]]; then
		kill "$SERVER_PID" 2>/dev/null || true
		wait "$SERVER_PID" 2>/dev/null || true
	fi
	rm -rf "$WORK"
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [[ -n "${TARMOUNT_BIN:-}" ]]; then
	BIN="$TARMOUNT_BIN"
else
	say "building tarmount"
	BIN="$WORK/tarmount"
	go build -o "$BIN" ./cmd/tarmount
fi
go build -o "$WORK/httpserve" ./scripts/httpserve

if [[ ! -f "$DATA/go.tar.gz" ]]; then
	goroot="$(go env GOROOT)"
	say "making go.tar.gz from $goroot"
	tar -C "$(dirname "$goroot")" -cf - "$(basename "$goroot")" | pigz -6 >"$DATA/go.tar.gz.tmp"
	mv "$DATA/go.tar.gz.tmp" "$DATA/go.tar.gz"
fi

# The files at 10%, 50% and 90% of the tar stream: the regular file whose
# header or data holds that offset (or the next one).
mapfile -t PROBES < <(tar -tvzf "$DATA/go.tar.gz" | python3 -c '
import sys
rows, off = [], 0
for line in sys.stdin:
    f = line.rstrip("\n").split(None, 5)
    size = int(f[2])
    name = f[5].split(" link to ")[0].split(" -> ")[0]
    rows.append((off, off + 512 + (size + 511) // 512 * 512, line[0], size, name))
    off = rows[-1][1]
for pct in (10, 50, 90):
    at = off * pct // 100
    print(next(n for s, e, t, size, n in rows if e > at and t == "-" and size > 0))
')
[[ ${#PROBES[@]} -eq 3 ]] || die "could not pick the probe files"
say "probe files: ${PROBES[*]}"

serve_objstore "$WORK/httpserve" "$DATA" "$WORK/server.log" || die "server did not start: $(cat "$WORK/server.log")"
URL="$BASE/go.tar.gz"

now() { date +%s.%N; }

# probes ROOT T0 TOOL: start the four probes on the tree at ROOT, each
# retrying every 20 ms until it succeeds (at most 5 minutes), and record
# the seconds since T0 when each succeeded. (Polling faster costs the
# tools that make files appear late CPU: hundreds of processes a second.)
probes() {
	local root=$1 t0=$2 tool=$3 pids=() i labels=(10% 50% 90%)
	for i in 0 1 2; do
		(
			until head -c1 "$root/${PROBES[$i]}" >/dev/null 2>&1; do sleep 0.02; done
			printf '%s\t%s\t%s\n' "$tool" "${labels[$i]}" "$(echo "$(now) - $t0" | bc)" >>"$TSV"
		) &
		pids+=($!)
	done
	(
		until "$root/go/bin/go" version >/dev/null 2>&1; do sleep 0.02; done
		printf '%s\t%s\t%s\n' "$tool" "go version" "$(echo "$(now) - $t0" | bc)" >>"$TSV"
	) &
	pids+=($!)
	local deadline=$((SECONDS + 300))
	for i in "${pids[@]}"; do
		while kill -0 "$i" 2>/dev/null; do
			((SECONDS < deadline)) || { kill "${pids[@]}" 2>/dev/null; die "$tool: a probe did not succeed in 5 minutes"; }
			sleep 0.02
		done
	done
	printf '%s\t%s\t%s\n' "$tool" "all" "$(echo "$(now) - $t0" | bc)" >>"$TSV"
}

# mount_run TOOL ARGS...: one run of tarmount with a fresh cache.
mount_run() {
	local tool=$1
	shift
	MNT="$WORK/mnt"
	mkdir -p "$MNT"
	rm -rf "$WORK/cache"
	sync
	local t0
	t0=$(now)
	"$BIN" "$URL" "$MNT" --cache-dir "$WORK/cache" --cache-disk 0 "$@" 2>"$WORK/mount.log" &
	MOUNT_PID=$!
	probes "$MNT" "$t0" "$tool"
	for _ in $(seq 3000); do
		grep -q 'msg=indexed' "$WORK/mount.log" && break
		sleep 0.01
	done
	# When the pass ended, from the log's clock.
	python3 - "$WORK/mount.log" "$t0" "$tool" >>"$TSV" <<'EOF'
import sys, datetime
log, t0, tool = sys.argv[1], float(sys.argv[2]), sys.argv[3]
for line in open(log):
    if "msg=indexed" in line:
        ts = line.split()[0].split("=", 1)[1]
        t = datetime.datetime.strptime(ts.replace("Z", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()
        print("%s\tpass ended\t%.3f" % (tool, t - t0))
EOF
	kill "$MOUNT_PID"
	wait_pid "$MOUNT_PID" 30 || die "tarmount did not exit after SIGTERM: $(tail -3 "$WORK/mount.log")"
	MOUNT_PID=""
	! is_mounted "$MNT" || die "$MNT still mounted"
}

extract_run() {
	local dest="$WORK/x.$1"
	mkdir -p "$dest"
	sync
	local t0
	t0=$(now)
	(curl -sSf "$URL" | tar -xzf - -C "$dest") &
	local pid=$!
	probes "$dest" "$t0" "curl | tar -xz"
	wait "$pid"
}

for run in $(seq "$RUNS"); do
	say "round $run of $RUNS"
	if ((run % 2)); then
		mount_run tarmount
		mount_run "tarmount --wait-index" --wait-index
		extract_run "$run"
	else
		extract_run "$run"
		mount_run "tarmount --wait-index" --wait-index
		mount_run tarmount
	fi
done

python3 - "$TSV" "$RUNS" "${PROBES[@]}" <<'EOF' | tee "$OUT/bench-progressive.md"
import sys, statistics
tsv, runs, probes = sys.argv[1], sys.argv[2], sys.argv[3:]
cells = {}
for line in open(tsv):
    tool, what, sec = line.rstrip("\n").split("\t")
    cells.setdefault((tool, what), []).append(float(sec))
tools = ["tarmount", "tarmount --wait-index", "curl | tar -xz"]
cols = ["10%", "50%", "90%", "go version", "all", "pass ended"]
def med(v): return statistics.median(v) if v else None
print("Seconds from the start until the first byte of the file at 10%%, 50%% and 90%% of the tar stream, "
      "`go version` from the tree, all of them, and the end of the index pass; median of %s runs (min-max), "
      "and the ratio to curl | tar -xz.\n" % runs)
print("Files: " + ", ".join("`%s`" % p for p in probes) + "\n")
print("| tool | " + " | ".join(cols) + " |")
print("|---|" + "---:|" * len(cols))
for t in tools:
    row = []
    for c in cols:
        v = cells.get((t, c), [])
        if not v:
            row.append("")
            continue
        m = med(v)
        peer = med(cells.get(("curl | tar -xz", c), []))
        ratio = " (%.2fx)" % (m / peer) if peer and t != "curl | tar -xz" else ""
        row.append("%.2f s%s<br>%.2f–%.2f" % (m, ratio, min(v), max(v)))
    print("| %s | %s |" % (t.replace("|", "\\|"), " | ".join(row)))
EOF
