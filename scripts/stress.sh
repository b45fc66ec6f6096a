#!/usr/bin/env bash
# Load test of a tarmount mount, for long runs (issue "Reliability and
# security"): 64 readers read random ranges of random files through the
# mount, verifying every byte against a local extraction, for DURATION in
# all, in two phases of half each: a plain mount, then a mount with
# --materialize filling a local copy behind it. It checks that
#   - every read returns the right bytes;
#   - no reader is stuck (a watchdog: each open, read and close returns
#     within STALL; if not, tarmount's goroutine stacks go to its log);
#   - tarmount's open descriptors (/proc/PID/fd) and goroutines
#     (go_goroutines from --metrics-addr), sampled every second, do not
#     grow from the first third of the load to the last, and come back to
#     their level at rest afterwards;
#   - its peak resident memory (VmHWM) stays within --cache-mem plus the
#     80 MiB that tarmount documents;
#   - it unmounts and exits 0 on SIGTERM;
# and reports reads/s, p50/p99 read latency and bytes fetched in a summary
# table. The logic is scripts/stress/load (a Go package), which
# TestStress in tests/ runs briefly under the race detector.
#
# Dataset: a tar.gz of this machine's Go toolchain (about 15k files), made
# once under SCRATCH with its reference extraction, served by
# scripts/httpserve on 127.0.0.1 (unshaped unless SHAPE is set).
#
#   bash scripts/stress.sh                       # needs root and /dev/fuse; 10 minutes
#   DURATION=2m bash scripts/stress.sh
#
# Environment:
#   DURATION=10m        time under load, in all (a Go duration)
#   READERS=64
#   CACHE_MEM=67108864  tarmount --cache-mem (bytes); the archive decodes to far more
#   CACHE_DISK=0        tarmount --cache-disk: 0 sends every span read to the server
#   PHASES=lazy,materialize
#   STALL=30s           watchdog limit for one call
#   SHAPE=""            httpserve flags, e.g. "-latency 20ms -rate 80MB"
#   SCRATCH=${TMPDIR:-/tmp}/tarmount-stress   dataset and run directories
#   TARMOUNT_ARGS=""    more tarmount flags, e.g. "--span 1048576"
#   KEEP=1              keep the run directory (logs, caches, the materialized tree)
#
# Output: progress on stderr; the summary table on stdout and in
# $RUN/summary.md, the reports in $RUN/summary.json, tarmount's logs in
# $RUN/work/tarmount-PHASE.log. Exit status 1 on any violation.
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."

DURATION="${DURATION:-10m}"
READERS="${READERS:-64}"
CACHE_MEM="${CACHE_MEM:-$((64 << 20))}"
CACHE_DISK="${CACHE_DISK:-0}"
PHASES="${PHASES:-lazy,materialize}"
STALL="${STALL:-30s}"
SHAPE="${SHAPE:-}"
SCRATCH="${SCRATCH:-${TMPDIR:-/tmp}/tarmount-stress}"
TARMOUNT_ARGS="${TARMOUNT_ARGS:-}"
MOUNT_NAME=tarmount-stress # fuse.tarmount-stress in /proc/mounts

say() { printf '==> %s\n' "$*" >&2; }
warn() { printf 'stress.sh: warning: %s\n' "$*" >&2; }
die() {
	printf 'stress.sh: FAILED: %s\n' "$*" >&2
	exit 1
}

[[ "$SCRATCH" != *[[:space:]]* ]] || die "SCRATCH=$SCRATCH must not contain spaces"
command -v go >/dev/null || die "go not found in PATH"
[[ -e /dev/fuse ]] || die "/dev/fuse is missing: FUSE mounts are impossible here"
((EUID == 0)) || die "run as root (FUSE mounts, O_DIRECT through the mount)"
mkdir -p "$SCRATCH"
SCRATCH="$(cd "$SCRATCH" && pwd)"
RUN="$(mktemp -d "$SCRATCH/run.XXXXXX")"
BIN="$RUN/bin"

# is_mounted, wait_pid
. scripts/lib.sh

SERVER_PID=""
STRESS_PID=""
cleanup() {
	local status=$?
	trap - EXIT INT TERM
	local pid
	for pid in "$STRESS_PID" "$SERVER_PID"; do
		[[ -n "$pid" ]] || continue
		kill -TERM "$pid" 2>/dev/null || true
		if ! wait_pid "$pid" 60; then
			warn "process $pid did not exit 60 s after SIGTERM; killing it"
			kill -KILL "$pid" 2>/dev/null || true
		fi
		wait "$pid" 2>/dev/null || true
	done
	# Mounts the stress command could not clear (it was killed): ours only.
	local src mnt fstype rest left=0
	while read -r src mnt fstype rest; do
		if [[ "$fstype" == "fuse.$MOUNT_NAME" && "$mnt" == "$RUN"/* ]]; then
			warn "detaching leftover mount $mnt"
			"$BIN/tarmount" unmount "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || left=1
		fi
	done </proc/mounts
	if ((left)); then
		warn "a mount is still attached; leaving $RUN in place"
	elif [[ "${KEEP:-0}" == 1 || $status -ne 0 ]]; then
		printf '    run directory kept: %s\n' "$RUN" >&2
	else
		rm -rf "$RUN/work" "$RUN/bin"
	fi
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

say "building tarmount, httpserve and stress into $BIN"
mkdir -p "$BIN"
for p in cmd/tarmount scripts/httpserve scripts/stress; do
	timeout 600 go build -o "$BIN/$(basename "$p")" "./$p" || die "go build ./$p failed"
done

# The dataset: this machine's Go toolchain, once, and its extraction.
GOROOT_DIR="$(go env GOROOT)"
DATA="$SCRATCH/srv/go.tar.gz"
REF="$SCRATCH/ref"
mkdir -p "$SCRATCH/srv"
if [[ ! -s "$DATA" ]]; then
	say "making $DATA from $GOROOT_DIR (once)"
	timeout 900 tar -C "$GOROOT_DIR/.." -czf "$DATA.tmp" "$(basename "$GOROOT_DIR")" || die "tar -czf failed"
	mv "$DATA.tmp" "$DATA"
fi
data_id="$(stat -c '%s %Y' "$DATA")"
if [[ "$(cat "$REF.id" 2>/dev/null)" != "$data_id" ]]; then
	say "extracting $DATA into $REF (once)"
	rm -rf "$REF" "$REF.tmp" "$REF.id"
	mkdir -p "$REF.tmp"
	timeout 900 tar -C "$REF.tmp" -xzf "$DATA" || die "tar -xzf $DATA failed"
	mv "$REF.tmp" "$REF"
	printf '%s\n' "$data_id" >"$REF.id"
fi
say "$DATA: $(stat -c %s "$DATA") bytes, $(find "$REF" -type f | wc -l) files"

# shellcheck disable=SC2086 # SHAPE holds flags
"$BIN/httpserve" -addr 127.0.0.1:0 -dir "$SCRATCH/srv" $SHAPE >"$RUN/server.out" 2>"$RUN/server.log" &
SERVER_PID=$!
BASE=""
for _ in $(seq 300); do
	line="$(head -n 1 "$RUN/server.out" 2>/dev/null || true)"
	if [[ "$line" == "listening on http://"* ]]; then
		BASE="${line#listening on }"
		break
	fi
	kill -0 "$SERVER_PID" 2>/dev/null || die "httpserve exited: $(cat "$RUN/server.log")"
	sleep 0.1
done
[[ -n "$BASE" ]] || die "httpserve did not print its address within 30 s"
say "serving $BASE/go.tar.gz ${SHAPE:+($SHAPE)}"

# The stress command runs in the background so that a signal to this
# script is handled at once; it unmounts on SIGTERM.
status=0
# shellcheck disable=SC2086 # TARMOUNT_ARGS holds flags
"$BIN/stress" -tarmount "$BIN/tarmount" -url "$BASE/go.tar.gz" -ref "$REF" -work "$RUN/work" \
	-duration "$DURATION" -readers "$READERS" -cache-mem "$CACHE_MEM" -phases "$PHASES" -stall "$STALL" \
	-json "$RUN/summary.json" -- --mount-name "$MOUNT_NAME" --cache-disk "$CACHE_DISK" $TARMOUNT_ARGS \
	>"$RUN/summary.md" &
STRESS_PID=$!
wait "$STRESS_PID" || status=$?
STRESS_PID=""
cat "$RUN/summary.md"
case $status in
0) say "stress: every check passed" ;;
1) die "stress: a check failed (see above; tarmount's logs in $RUN/work)" ;;
*) die "stress: could not run (status $status)" ;;
esac
