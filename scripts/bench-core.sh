#!/usr/bin/env bash
# Reproducible measurements for tarmount's core targets, side by side with
# peers, in one run (see shared/DESIGN.md, "Performance targets"):
#   1. cold read of a small file deep in the archive, with a saved index
#   2. remount time with the saved index (start -> stat answers)
#   3. first mount without an index (the index pass), bytes fetched, with
#      the default fetch workers and with one (--fetch-workers 1),
#      vs curl | gzip -d, curl | pigz -d, curl | tar -xz; and the index pass
#      on the local file vs gzip -d and pigz -d
#   4. sequential read of the largest file through the mount vs curl | tar -xzO
# Scenarios 1, 2 and 4 share one mount per tool and run: start the mount, poll
# stat(MNT/go/VERSION) every 2 ms (2), cat the small file (1), cat the largest
# file (4), unmount. Peers: curl | tar, and ratarmount (pip, in a venv in the
# scratch dir) when it installs.
#
# Dataset: a tar.gz of the Go toolchain of this machine, made once in the
# scratch dir. It is served by scripts/httpserve on 127.0.0.1 twice: shaped
# like object storage (-latency 20ms -rate 80MB) and unshaped. Every scenario
# runs RUNS times with the tool order alternating; the table gives the median
# and min-max, and the bytes and requests the server counted during the
# measured step.
#
# Output: the markdown table on stdout, also in $OUT/bench-core.md, with
# $OUT/bench-core.json (every run), $OUT/runs.tsv and $OUT/server-PROFILE.log
# (every request the server answered, with its range and duration); progress
# on stderr.
#
#   bash scripts/bench-core.sh                 # needs root (or FUSE rights) and /dev/fuse
#   RUNS=3 PROFILES=objstore bash scripts/bench-core.sh
#
# Environment:
#   RUNS=5                 runs per scenario and tool
#   SCRATCH=${TMPDIR:-/tmp}/tarmount-bench   dataset, venv and work files (kept)
#   OUT=$SCRATCH/out       where the reports go
#   PROFILES="objstore unshaped"
#   RATARMOUNT=1           0 skips ratarmount
#   TARMOUNT_BIN=PATH      use this binary instead of building ./cmd/tarmount
#   SMALL_FILE=go/src/net/http/server.go   path inside the archive
#   KEEP=1                 keep the per-run work dir (logs, caches)
# shellcheck disable=SC2016 # the pipelines are run by bash -c with positional arguments
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."
REPO="$PWD"

RUNS="${RUNS:-5}"
SCRATCH="${SCRATCH:-${TMPDIR:-/tmp}/tarmount-bench}"
OUT="${OUT:-$SCRATCH/out}"
PROFILES="${PROFILES:-objstore unshaped}"
RATARMOUNT="${RATARMOUNT:-1}"
STEP_TIMEOUT="${STEP_TIMEOUT:-300}"   # one timed step (a cat, a curl pipeline)
MOUNT_TIMEOUT="${MOUNT_TIMEOUT:-120}" # a mount with a saved index to answer
INDEX_TIMEOUT="${INDEX_TIMEOUT:-600}" # a mount that builds its index to answer
SPAN_BYTES=$((4 << 20))               # tarmount's default span (decoded bytes)

say() { printf '==> %s\n' "$*" >&2; }
info() { printf '    %s\n' "$*" >&2; }
warn() { printf 'bench-core.sh: warning: %s\n' "$*" >&2; }
die() {
	printf 'bench-core.sh: FAILED: %s\n' "$*" >&2
	exit 1
}

[[ "$RUNS" =~ ^[1-9][0-9]*$ ]] || die "RUNS=$RUNS is not a positive integer"
[[ "$SCRATCH" != *[[:space:]]* ]] || die "SCRATCH=$SCRATCH must not contain spaces"
mkdir -p "$SCRATCH" "$OUT"
SCRATCH="$(cd "$SCRATCH" && pwd)"
OUT="$(cd "$OUT" && pwd)"
WORK="$(mktemp -d "$SCRATCH/run.XXXXXX")"
BIN="$WORK/bin"
RUNS_TSV="$WORK/runs.tsv"
META="$WORK/meta.tsv"
NOTES="$WORK/notes.txt"
: >"$RUNS_TSV"
: >"$META"
: >"$NOTES"

# ---------------------------------------------------------------- processes

declare -A SERVER_PID=() BASE=()
MOUNT_PID=""  # the one mount process running at a time
MOUNT_DIR=""
MOUNTPOINTS=() # every mountpoint this run uses

# is_mounted, wait_pid
. scripts/lib.sh

# stop_pid PID: SIGTERM, then SIGKILL after 15 s.
stop_pid() {
	local pid=$1
	kill -0 "$pid" 2>/dev/null || return 0
	kill -TERM "$pid" 2>/dev/null || true
	if ! wait_pid "$pid" 15; then
		warn "process $pid did not exit 15 s after SIGTERM; killing it"
		kill -KILL "$pid" 2>/dev/null || true
		wait_pid "$pid" 5 || warn "process $pid survived SIGKILL"
	fi
	wait "$pid" 2>/dev/null || true
}

detach() {
	local mnt=$1
	if is_mounted "$mnt"; then
		fusermount3 -u -z "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || warn "could not unmount $mnt"
	fi
}

# run_fg CMD...: run CMD in the background and wait for it, so that a signal
# to this script is handled at once (bash defers traps while a foreground
# child runs); cleanup stops FG_PID. Returns CMD's status.
FG_PID=""
run_fg() {
	local rc=0
	"$@" &
	FG_PID=$!
	wait "$FG_PID" || rc=$?
	FG_PID=""
	return "$rc"
}

# stop_mount: stop the running mount process (it unmounts on SIGTERM) and
# make sure nothing is left mounted.
stop_mount() {
	[[ -n "$MOUNT_PID" ]] || return 0
	local pid=$MOUNT_PID mnt=$MOUNT_DIR
	if kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid" 2>/dev/null || true
		if ! wait_pid "$pid" 15; then
			warn "mount process $pid did not exit 15 s after SIGTERM; detaching $mnt"
			detach "$mnt"
			wait_pid "$pid" 5 || kill -KILL "$pid" 2>/dev/null || true
		fi
	fi
	wait "$pid" 2>/dev/null || true
	detach "$mnt"
	MOUNT_PID="" MOUNT_DIR=""
}

cleanup() {
	local status=$?
	trap - EXIT INT TERM
	[[ -z "$FG_PID" ]] || stop_pid "$FG_PID" || true
	stop_mount || true
	local m p
	for m in "${MOUNTPOINTS[@]}"; do detach "$m" || true; done
	for p in "${!SERVER_PID[@]}"; do stop_pid "${SERVER_PID[$p]}" || true; done
	local busy=0
	for m in "${MOUNTPOINTS[@]}"; do is_mounted "$m" && busy=1; done
	if ((busy)); then
		warn "a mount is still attached; leaving $WORK in place"
	elif [[ "${KEEP:-0}" == 1 ]]; then
		info "work files kept in $WORK"
	else
		rm -rf "$WORK"
	fi
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---------------------------------------------------------------- tools

install_missing() {
	local -A pkg_of=([curl]=curl [pigz]=pigz [fusermount3]=fuse3 [tar]=tar [gzip]=gzip)
	local -a missing=()
	local c p
	for c in "${!pkg_of[@]}"; do
		if ! command -v "$c" >/dev/null 2>&1; then
			p=${pkg_of[$c]}
			[[ " ${missing[*]-} " == *" $p "* ]] || missing+=("$p")
		fi
	done
	if [[ "$RATARMOUNT" != 0 && ! -x "$SCRATCH/venv/bin/ratarmount" ]] &&
		command -v python3 >/dev/null && ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
		missing+=(python3-venv)
	fi
	((${#missing[@]})) || return 0
	say "installing ${missing[*]} with apt-get"
	((EUID == 0)) || die "need root to install ${missing[*]}"
	command -v apt-get >/dev/null || die "apt-get not found; install ${missing[*]} by hand"
	local log="$WORK/apt.log"
	if ! timeout 600 apt-get update -q >"$log" 2>&1 ||
		! DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -q --no-install-recommends \
			"${missing[@]}" >>"$log" 2>&1; then
		tail -20 "$log" >&2
		die "apt-get install ${missing[*]} failed"
	fi
}

say "checking tools"
command -v go >/dev/null || die "go not found in PATH"
[[ -e /dev/fuse ]] || die "/dev/fuse is missing: FUSE mounts are impossible here"
install_missing

say "building tarmount, httpserve and the bench helper into $BIN"
mkdir -p "$BIN"
if [[ -n "${TARMOUNT_BIN:-}" ]]; then
	[[ -x "$TARMOUNT_BIN" ]] || die "TARMOUNT_BIN=$TARMOUNT_BIN is not executable"
	cp "$TARMOUNT_BIN" "$BIN/tarmount"
else
	timeout 600 go build -o "$BIN/tarmount" ./cmd/tarmount ||
		die "go build ./cmd/tarmount failed (the tree may be mid-edit; set TARMOUNT_BIN to a built binary)"
fi
timeout 600 go build -o "$BIN/httpserve" ./scripts/httpserve || die "go build ./scripts/httpserve failed"
timeout 600 go build -o "$BIN/bench" ./scripts/bench || die "go build ./scripts/bench failed"
TM="$BIN/tarmount"
BENCH="$BIN/bench"

# ratarmount, in a venv in the scratch dir (kept between runs).
RATAR=""
RATAR_STATUS="skipped (RATARMOUNT=0)"
if [[ "$RATARMOUNT" != 0 ]]; then
	venv="$SCRATCH/venv"
	if ! "$venv/bin/ratarmount" --version >/dev/null 2>&1; then
		say "installing ratarmount into $venv (pip: ratarmount fsspec aiohttp requests)"
		rm -rf "$venv"
		if ! command -v python3 >/dev/null; then
			RATAR_STATUS="not available: python3 not found"
		elif ! timeout 300 python3 -m venv "$venv" >"$WORK/venv.log" 2>&1; then
			RATAR_STATUS="not available: python3 -m venv failed: $(tail -1 "$WORK/venv.log")"
		elif ! timeout 600 "$venv/bin/pip" install -q ratarmount fsspec aiohttp requests >"$WORK/pip.log" 2>&1; then
			RATAR_STATUS="not available: pip install failed: $(grep -v '^\s*$' "$WORK/pip.log" | tail -1)"
			rm -rf "$venv"
		fi
	fi
	if "$venv/bin/ratarmount" --version >/dev/null 2>&1; then
		RATAR="$venv/bin/ratarmount"
		RATAR_STATUS="ratarmount $("$RATAR" --version 2>/dev/null | awk 'NR == 1 { print $2 }')"
		RATAR_STATUS+=" ($("$RATAR" --version 2>/dev/null | awk '$1 == "rapidgzip" || $1 == "indexed_gzip" || $1 == "fsspec" { printf "%s%s %s", sep, $1, $2; sep = ", " }'))"
	else
		warn "ratarmount $RATAR_STATUS"
	fi
fi
info "ratarmount: $RATAR_STATUS"

# ---------------------------------------------------------------- dataset

GOROOT_DIR="$(go env GOROOT)"
DATA="$SCRATCH/go.tar.gz"
if [[ ! -s "$DATA" ]]; then
	say "making $DATA from $GOROOT_DIR (once)"
	timeout 900 tar -C "$GOROOT_DIR/.." -czf "$DATA.tmp" "$(basename "$GOROOT_DIR")" || die "tar -czf failed"
	mv "$DATA.tmp" "$DATA"
fi
# Facts about the archive, computed once per archive version.
FACTS="$SCRATCH/go.tar.gz.facts"
LISTING="$SCRATCH/go.tar.gz.list"
data_id="$(stat -c '%s %Y' "$DATA")"
if [[ ! -s "$FACTS" || "$(sed -n 1p "$FACTS")" != "$data_id" ]]; then
	say "listing $DATA (once)"
	timeout 900 tar -tvzf "$DATA" >"$LISTING.tmp" || die "tar -tvzf $DATA failed"
	mv "$LISTING.tmp" "$LISTING"
	tar_bytes="$(gzip -dc "$DATA" | wc -c)"
	printf '%s\n%s\n' "$data_id" "$tar_bytes" >"$FACTS"
fi
TAR_BYTES="$(sed -n 2p "$FACTS")"
OBJECT_BYTES="$(stat -c %s "$DATA")"
ENTRIES="$(wc -l <"$LISTING")"
TOP="$(awk 'NR == 1 { sub(/\/.*/, "", $6); print $6 }' "$LISTING")"
# size_of PATH: size in the archive listing, empty if absent (regular files).
size_of() { awk -v f="$1" '$1 ~ /^-/ && $6 == f { print $3; exit }' "$LISTING"; }
SMALL="${SMALL_FILE:-$TOP/src/net/http/server.go}"
SMALL_BYTES="$(size_of "$SMALL")"
[[ -n "$SMALL_BYTES" ]] || die "$SMALL is not a regular file in $DATA (set SMALL_FILE)"
read -r BIG_BYTES BIG < <(awk '$1 ~ /^-/ { print $3, $6 }' "$LISTING" | sort -n | tail -1)
[[ -n "$BIG" ]] || die "no regular file in $DATA"
mk_sums() {
	[[ -s "$SCRATCH/sums" && "$(sed -n 1p "$SCRATCH/sums")" == "$data_id $SMALL $BIG" ]] && return
	local a b
	a="$(timeout 900 tar -xzOf "$DATA" "$SMALL" | sha256sum | cut -d' ' -f1)" || return 1
	b="$(timeout 900 tar -xzOf "$DATA" "$BIG" | sha256sum | cut -d' ' -f1)" || return 1
	printf '%s\n%s\n%s\n' "$data_id $SMALL $BIG" "$a" "$b" >"$SCRATCH/sums"
}
mk_sums || die "could not checksum $SMALL and $BIG from $DATA"
SMALL_SUM="$(sed -n 2p "$SCRATCH/sums")"
BIG_SUM="$(sed -n 3p "$SCRATCH/sums")"
info "$DATA: $OBJECT_BYTES bytes, tar $TAR_BYTES bytes, $ENTRIES entries"
info "small file $SMALL ($SMALL_BYTES bytes); largest file $BIG ($BIG_BYTES bytes)"

# ---------------------------------------------------------------- servers

mkdir -p "$SCRATCH/srv"
ln -f "$DATA" "$SCRATCH/srv/go.tar.gz" 2>/dev/null || cp -f "$DATA" "$SCRATCH/srv/go.tar.gz"

declare -A SHAPE=([objstore]="-latency 20ms -rate 80MB" [unshaped]="")
for p in $PROFILES; do
	[[ -v "SHAPE[$p]" ]] || die "unknown profile $p (known: ${!SHAPE[*]})"
	say "serving $SCRATCH/srv on 127.0.0.1: $p ${SHAPE[$p]}"
	# shellcheck disable=SC2086 # SHAPE holds flags
	"$BIN/httpserve" -addr 127.0.0.1:0 -dir "$SCRATCH/srv" -v ${SHAPE[$p]} \
		>"$WORK/server-$p.out" 2>"$WORK/server-$p.log" &
	SERVER_PID[$p]=$!
	for _ in $(seq 300); do
		line="$(head -n 1 "$WORK/server-$p.out" 2>/dev/null || true)"
		if [[ "$line" == "listening on http://"* ]]; then
			BASE[$p]="${line#listening on }"
			break
		fi
		kill -0 "${SERVER_PID[$p]}" 2>/dev/null || die "httpserve exited: $(cat "$WORK/server-$p.log")"
		sleep 0.1
	done
	[[ -n "${BASE[$p]:-}" ]] || die "httpserve did not print its address within 30 s"
	info "${BASE[$p]}/go.tar.gz"
done

# ---------------------------------------------------------------- measuring

# record SCENARIO PROFILE TOOL RUN STATUS SECONDS BYTES REQUESTS PAYLOAD [NOTE]
record() {
	local -a f=("${@:1:9}")
	while ((${#f[@]} < 9)); do f+=(""); done
	local note="${*:10}"
	printf '%s\t' "${f[@]}" >>"$RUNS_TSV"
	printf '%s\n' "${note//$'\t'/ }" >>"$RUNS_TSV"
}
SC1="1. cold small-file read (saved index)"
SC2="2. remount with saved index"
SC3="3. first mount, no index (index pass)"
SC4="4. sequential read of the largest file"
SC5="5. whole mount cycle (bytes only)"

elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.6f", b - a }'; }
# stats PROFILE: "requests bytes" so far (0 0 for the local profile).
stats() {
	if [[ "$1" == local ]]; then
		echo "-1 -1"
	else
		"$BENCH" stats "${BASE[$1]}" || echo "-1 -1"
	fi
}
# delta "R0 B0" "R1 B1": sets D_BYTES and D_REQS (-1 when not measured).
delta() {
	local r0 b0 r1 b1
	read -r r0 b0 <<<"$1"
	read -r r1 b1 <<<"$2"
	if ((r0 < 0 || r1 < 0)); then
		D_BYTES=-1 D_REQS=-1
	else
		D_BYTES=$((b1 - b0)) D_REQS=$((r1 - r0))
	fi
}
hbytes() { awk -v n="$1" 'BEGIN { if (n < 0) print "?"; else if (n >= 1e6) printf "%.1f MB", n / 1e6; else printf "%.0f kB", n / 1e3 }'; }

# start_mount TOOL PROFILE SRC MNT CACHE LOG: start a mount in the
# background; sets MOUNT_PID, MOUNT_DIR and T_START.
start_mount() {
	local tool=$1 src=$3 mnt=$4 cache=$5 log=$6
	mkdir -p "$mnt" "$cache"
	is_mounted "$mnt" && die "$mnt is already mounted"
	MOUNT_DIR=$mnt
	case $tool in
	tarmount | "tarmount --fetch-workers 1")
		T_START=$EPOCHREALTIME
		# No disk cache: each run's reads must be cold, not served from the
		# blocks an earlier run kept on disk. ${tool#tarmount} is empty or
		# the variant's flags.
		# shellcheck disable=SC2086 # the variant's flags split into words
		"$TM" "$src" "$mnt" --cache-dir "$cache" --cache-disk 0 ${tool#tarmount} >"$log" 2>&1 &
		;;
	ratarmount)
		T_START=$EPOCHREALTIME
		"$RATAR" -f --index-folders "$cache" "$src" "$mnt" >"$log" 2>&1 &
		;;
	esac
	MOUNT_PID=$!
}

# wait_mount TIMEOUT: poll MNT/TOP/VERSION; sets T_READY. 1 on failure.
wait_mount() {
	run_fg "$BENCH" waitpath -pid "$MOUNT_PID" -timeout "${1}s" "$MOUNT_DIR/$TOP/VERSION" >"$WORK/ready" || return 1
	T_READY="$(cat "$WORK/ready")"
}

# log_elapsed LOG MSG: the elapsed= of tarmount's log line msg=MSG, in seconds.
log_elapsed() {
	local d
	d="$(grep -m1 "msg=$2 " "$1" | grep -o 'elapsed=[^ ]*' | cut -d= -f2)" || return 1
	[[ -n "$d" ]] && "$BENCH" dur "$d"
}

# timed_cat PROFILE SCENARIO TOOL RUN FILE PAYLOAD SUM: time a cat of FILE
# to /dev/null, record it with the server bytes, then check its content.
timed_cat() {
	local p=$1 sc=$2 tool=$3 run=$4 file=$5 payload=$6 sum=$7
	local s0 s1 t0 t1 rc=0 d got
	s0="$(stats "$p")"
	t0=$EPOCHREALTIME
	run_fg timeout -k 5 "$STEP_TIMEOUT" cat "$file" >/dev/null || rc=$?
	t1=$EPOCHREALTIME
	s1="$(stats "$p")"
	delta "$s0" "$s1"
	if ((rc != 0)); then
		record "$sc" "$p" "$tool" "$run" fail - "$D_BYTES" "$D_REQS" "$payload" "cat exit $rc"
		warn "$tool: cat $file: exit $rc"
		return 1
	fi
	run_fg timeout -k 5 "$STEP_TIMEOUT" sha256sum "$file" >"$WORK/sum" || true
	got="$(cut -d' ' -f1 "$WORK/sum")"
	if [[ "$got" != "$sum" ]]; then
		record "$sc" "$p" "$tool" "$run" fail "$(elapsed "$t0" "$t1")" "$D_BYTES" "$D_REQS" "$payload" "content mismatch"
		warn "$tool: $file: content differs from the archive"
		return 1
	fi
	LAST_SECONDS="$(elapsed "$t0" "$t1")" LAST_BYTES=$D_BYTES LAST_REQS=$D_REQS LAST_T1=$t1 LAST_S1=$s1
	record "$sc" "$p" "$tool" "$run" ok "$LAST_SECONDS" "$D_BYTES" "$D_REQS" "$payload"
}

# mount_cycle TOOL PROFILE RUN: scenarios 2, 1 and 4 on one fresh mount
# with a saved index.
mount_cycle() {
	local tool=$1 p=$2 run=$3 s0 s1 s3 d line mnt="$WORK/mnt-$1"
	local log="$WORK/logs/$p-$tool-cycle-$run.log"
	s0="$(stats "$p")"
	start_mount "$tool" "$p" "${SRC[$tool.$p]}" "$mnt" "${CACHE[$tool.$p]}" "$log"
	if ! wait_mount "$MOUNT_TIMEOUT"; then
		record "$SC2" "$p" "$tool" "$run" fail - -1 -1 0 "mount did not answer: $(tail -1 "$log")"
		warn "$tool did not mount: $(tail -3 "$log")"
		stop_mount
		return 0
	fi
	s1="$(stats "$p")"
	delta "$s0" "$s1"
	record "$SC2" "$p" "$tool" "$run" ok "$(elapsed "$T_START" "$T_READY")" "$D_BYTES" "$D_REQS" 0
	line="remount $(elapsed "$T_START" "$T_READY")s ($(hbytes "$D_BYTES"), $D_REQS req)"
	if [[ "$tool" == tarmount ]]; then
		local own=""
		for _ in $(seq 50); do
			own="$(log_elapsed "$log" ready)" && break
			sleep 0.02
		done
		[[ -n "$own" ]] && record "$SC2" "$p" "tarmount (its own ready log)" "$run" ok "$own" -1 -1 0
	fi
	if timed_cat "$p" "$SC1" "$tool" "$run" "$mnt/$SMALL" 0 "$SMALL_SUM"; then
		line+=", small $LAST_SECONDS s ($(hbytes "$LAST_BYTES"), $LAST_REQS req)"
		delta "$s0" "$LAST_S1"
		record "$SC1" "$p" "$tool: start + mount + cat" "$run" ok "$(elapsed "$T_START" "$LAST_T1")" \
			"$D_BYTES" "$D_REQS" 0
	fi
	if timed_cat "$p" "$SC4" "$tool" "$run" "$mnt/$BIG" "$BIG_BYTES" "$BIG_SUM"; then
		line+=", large $LAST_SECONDS s ($(hbytes "$LAST_BYTES"), $LAST_REQS req)"
	fi
	sleep 0.2 # let in-flight readahead land before the lifetime count
	s3="$(stats "$p")"
	delta "$s0" "$s3"
	record "$SC5" "$p" "$tool" "$run" ok - "$D_BYTES" "$D_REQS" 0 \
		"mount + stat + small + large"
	stop_mount
	info "$tool: $line; whole cycle $(hbytes "$D_BYTES"), $D_REQS req"
}

# pipeline PROFILE SCENARIO TOOL RUN PAYLOAD CMD...: time a shell pipeline
# (run by bash -c with pipefail, under a timeout).
pipeline() {
	local p=$1 sc=$2 tool=$3 run=$4 payload=$5 s0 s1 t0 t1 rc=0 d
	shift 5
	s0="$(stats "$p")"
	t0=$EPOCHREALTIME
	run_fg timeout -k 5 "$STEP_TIMEOUT" bash -o pipefail -c "$@" || rc=$?
	t1=$EPOCHREALTIME
	s1="$(stats "$p")"
	delta "$s0" "$s1"
	if ((rc != 0)); then
		record "$sc" "$p" "$tool" "$run" fail - "$D_BYTES" "$D_REQS" "$payload" "exit $rc"
		warn "$tool: exit $rc"
		return 0
	fi
	record "$sc" "$p" "$tool" "$run" ok "$(elapsed "$t0" "$t1")" "$D_BYTES" "$D_REQS" "$payload"
	info "$tool: $(elapsed "$t0" "$t1") s ($(hbytes "$D_BYTES"), $D_REQS req)"
}

# first_mount TOOL PROFILE RUN: scenario 3 with an empty cache.
first_mount() {
	# A variant ("tarmount --fetch-workers 1") mounts what its tool does.
	local tool=$1 p=$2 run=$3 base=${1%% *} s0 s1 d own=""
	local mnt="$WORK/mnt-$base" cache="$WORK/fresh-cache" log="$WORK/logs/$p-${1// /_}-first-$run.log"
	rm -rf "$cache"
	s0="$(stats "$p")"
	start_mount "$tool" "$p" "${SRC[$base.$p]}" "$mnt" "$cache" "$log"
	if ! wait_mount "$INDEX_TIMEOUT"; then
		record "$SC3" "$p" "$tool" "$run" fail - -1 -1 "$TAR_BYTES" "mount did not answer: $(tail -1 "$log")"
		warn "$tool did not mount: $(tail -3 "$log")"
		stop_mount
		return 0
	fi
	s1="$(stats "$p")"
	delta "$s0" "$s1"
	record "$SC3" "$p" "$tool" "$run" ok "$(elapsed "$T_START" "$T_READY")" "$D_BYTES" "$D_REQS" "$TAR_BYTES"
	if [[ "$tool" == tarmount* ]] && own="$(log_elapsed "$log" indexed)"; then
		record "$SC3" "$p" "$tool (its own 'indexed' log)" "$run" ok "$own" -1 -1 "$TAR_BYTES"
	fi
	stop_mount
	rm -rf "$cache"
	info "$tool: first mount $(elapsed "$T_START" "$T_READY") s ($(hbytes "$D_BYTES"), $D_REQS req)"
}

# in_order RUN A B C...: the tools, reversed on even runs.
in_order() {
	local run=$1
	shift
	if ((run % 2)); then
		printf '%s\n' "$@"
	else
		printf '%s\n' "$@" | tac
	fi
}

# ---------------------------------------------------------------- setup

mkdir -p "$WORK/logs"
declare -A SRC=() CACHE=()
MOUNT_TOOLS=(tarmount)
[[ -n "$RATAR" ]] && MOUNT_TOOLS+=(ratarmount)
for t in "${MOUNT_TOOLS[@]}"; do MOUNTPOINTS+=("$WORK/mnt-$t"); done

for p in $PROFILES; do
	url="${BASE[$p]}/go.tar.gz"
	SRC[tarmount.$p]=$url
	CACHE[tarmount.$p]="$WORK/cache-tarmount-$p"
	say "$p: saving tarmount's index (tarmount index $url --cache-dir DIR)"
	s0="$(stats "$p")"
	t0=$EPOCHREALTIME
	run_fg timeout -k 5 "$INDEX_TIMEOUT" "$TM" index "$url" --cache-dir "${CACHE[tarmount.$p]}" \
		>"$WORK/logs/$p-tarmount-index.log" 2>&1 ||
		die "tarmount index failed: $(tail -5 "$WORK/logs/$p-tarmount-index.log")"
	delta "$s0" "$(stats "$p")"
	info "$(elapsed "$t0" "$EPOCHREALTIME") s, $(hbytes "$D_BYTES"), $D_REQS requests; $(grep -o 'checkpoints=[0-9]*' "$WORK/logs/$p-tarmount-index.log" | head -1)"
	CHECKPOINTS="$(grep -o 'checkpoints=[0-9]*' "$WORK/logs/$p-tarmount-index.log" | head -1 | cut -d= -f2)"
	if [[ -n "$RATAR" ]]; then
		SRC[ratarmount.$p]=$url
		CACHE[ratarmount.$p]="$WORK/cache-ratarmount-$p"
		say "$p: saving ratarmount's index (a first mount of $url)"
		s0="$(stats "$p")"
		start_mount ratarmount "$p" "$url" "$WORK/mnt-ratarmount" "${CACHE[ratarmount.$p]}" "$WORK/logs/$p-ratarmount-index.log"
		if wait_mount "$INDEX_TIMEOUT"; then
			delta "$s0" "$(stats "$p")"
			info "$(elapsed "$T_START" "$T_READY") s, $(hbytes "$D_BYTES"), $D_REQS requests"
			stop_mount
		else
			stop_mount
			warn "ratarmount could not mount $url: $(tail -3 "$WORK/logs/$p-ratarmount-index.log")"
			echo "ratarmount could not mount the http URL ($(tail -1 "$WORK/logs/$p-ratarmount-index.log")); it read the local file instead in profile $p, so its bytes fetched are 0" >>"$NOTES"
			SRC[ratarmount.$p]=$DATA
			start_mount ratarmount "$p" "$DATA" "$WORK/mnt-ratarmount" "${CACHE[ratarmount.$p]}" "$WORK/logs/$p-ratarmount-index-local.log"
			wait_mount "$INDEX_TIMEOUT" || die "ratarmount cannot mount the local file either: $(tail -3 "$WORK/logs/$p-ratarmount-index-local.log")"
			stop_mount
		fi
	fi
done

LOAD_START="$(cut -d' ' -f1-3 /proc/loadavg)"
T_BENCH=$SECONDS

# ---------------------------------------------------------------- runs

for p in $PROFILES; do
	url="${BASE[$p]}/go.tar.gz"
	for ((run = 1; run <= RUNS; run++)); do
		say "$p, run $run/$RUNS: scenarios 1, 2, 4 (one mount per tool) and peers"
		mapfile -t order < <(in_order "$run" "${MOUNT_TOOLS[@]}" curl-small curl-big)
		for t in "${order[@]}"; do
			case $t in
			curl-small)
				pipeline "$p" "$SC1" "curl | tar -xzO" "$run" 0 \
					'curl -sSf "$1" | tar -xzO "$2" >/dev/null' _ "$url" "$SMALL"
				;;
			curl-big)
				pipeline "$p" "$SC4" "curl | tar -xzO" "$run" "$BIG_BYTES" \
					'curl -sSf "$1" | tar -xzO "$2" >/dev/null' _ "$url" "$BIG"
				;;
			*) mount_cycle "$t" "$p" "$run" ;;
			esac
		done

		say "$p, run $run/$RUNS: scenario 3 (first mount, empty cache) and peers"
		rm -rf "$WORK/extract"
		mapfile -t order < <(in_order "$run" "${MOUNT_TOOLS[@]}" "tarmount --fetch-workers 1" gzip pigz tar)
		for t in "${order[@]}"; do
			case $t in
			gzip)
				pipeline "$p" "$SC3" "curl | gzip -d" "$run" "$TAR_BYTES" \
					'curl -sSf "$1" | gzip -d >/dev/null' _ "$url"
				;;
			pigz)
				pipeline "$p" "$SC3" "curl | pigz -d" "$run" "$TAR_BYTES" \
					'curl -sSf "$1" | pigz -d >/dev/null' _ "$url"
				;;
			tar)
				mkdir -p "$WORK/extract"
				pipeline "$p" "$SC3" "curl | tar -xz -C DIR" "$run" "$TAR_BYTES" \
					'curl -sSf "$1" | tar -xz -C "$2"' _ "$url" "$WORK/extract"
				rm -rf "$WORK/extract"
				;;
			*) first_mount "$t" "$p" "$run" ;;
			esac
		done
	done
done

for ((run = 1; run <= RUNS; run++)); do
	say "local file, run $run/$RUNS: index pass vs gzip -d, pigz -d"
	mapfile -t order < <(in_order "$run" tarmount gzip pigz)
	for t in "${order[@]}"; do
		case $t in
		tarmount)
			rm -rf "$WORK/fresh-cache"
			pipeline local "$SC3" "tarmount index FILE" "$run" "$TAR_BYTES" \
				'"$1" index "$2" --cache-dir "$3" 2>/dev/null' _ "$TM" "$DATA" "$WORK/fresh-cache"
			rm -rf "$WORK/fresh-cache"
			;;
		gzip) pipeline local "$SC3" "gzip -d < FILE" "$run" "$TAR_BYTES" 'gzip -d <"$1" >/dev/null' _ "$DATA" ;;
		pigz) pipeline local "$SC3" "pigz -d < FILE" "$run" "$TAR_BYTES" 'pigz -d <"$1" >/dev/null' _ "$DATA" ;;
		esac
	done
done

# ---------------------------------------------------------------- report

commit="$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)"
[[ -z "$(git -C "$REPO" status --porcelain 2>/dev/null | grep -v '^??' || true)" ]] || commit+=" + uncommitted changes"
[[ -z "${TARMOUNT_BIN:-}" ]] || commit="binary from TARMOUNT_BIN"
meta() { printf '%s\t%s\n' "$1" "$2" >>"$META"; }
meta date "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
meta machine "$(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo), kernel $(uname -r)"
meta "load average (1, 5, 15 min)" "$LOAD_START at start of the runs, $(cut -d' ' -f1-3 /proc/loadavg) at the end"
meta tools "$(go version | cut -d' ' -f3), tarmount $commit, $RATAR_STATUS, $(curl --version | head -1 | cut -d' ' -f1-2), $(gzip --version | head -1), pigz $(pigz --version 2>&1 | cut -d' ' -f2), $(tar --version | head -1)"
meta dataset "go.tar.gz of $TOP ($(go version | cut -d' ' -f3)): $OBJECT_BYTES bytes gzip, $TAR_BYTES bytes tar, $ENTRIES entries; tarmount index: ${CHECKPOINTS:-?} checkpoints (~$((OBJECT_BYTES / (${CHECKPOINTS:-1} + 1) / 1000)) kB compressed per span)"
meta _object_bytes "$OBJECT_BYTES"
meta _span_bytes "$SPAN_BYTES"
meta files "small: $SMALL ($SMALL_BYTES bytes); largest: $BIG ($BIG_BYTES bytes)"
meta profiles "object storage = httpserve -latency 20ms -rate 80MB (per connection); unshaped = no delay or cap; both on 127.0.0.1"
meta runs "$RUNS per tool and scenario, tool order reversed on even runs; $((SECONDS - T_BENCH)) s of measuring"
meta "MB/s" "payload / median time, 1e6 B: the file for scenario 4, the tar stream ($TAR_BYTES B) for scenario 3"

cat >>"$NOTES" <<EOF
Scenarios 2, 1 and 4 share one mount per tool and run: start the mount, poll stat(MNT/$TOP/VERSION) every 2 ms (scenario 2: process start to answer), then \`cat MNT/$SMALL > /dev/null\` (1), then \`cat MNT/$BIG > /dev/null\` (4); each cat is checked against the archive after it is timed. "fetched" is what the server counted between just before and just after each step.
Scenario 5 is every byte the server sent during one mount cycle (mount, stat, both cats, then 0.2 s), so background fetches show there.
Commands: \`tarmount index URL --cache-dir D\` once per profile; \`tarmount URL MNT --cache-dir D\`; \`ratarmount -f --index-folders D URL MNT\` (index saved by an untimed first mount); \`curl -sSf URL | tar -xzO FILE > /dev/null\`; \`curl -sSf URL | gzip -d > /dev/null\`; \`curl -sSf URL | pigz -d > /dev/null\`; \`curl -sSf URL | tar -xz -C DIR\`; local: \`tarmount index FILE --cache-dir EMPTY\` (whole process), \`gzip -d < FILE\`, \`pigz -d < FILE\`.
GNU tar reads the whole stream even after it found the member, so curl | tar -xzO fetches the whole object.
"TOOL: start + mount + cat" rows time the same cold read from the start of the mount process (waiting for the mount, then the cat), as curl | tar does from nothing; their bytes include what the mount fetched before the cat.
"tarmount (its own ... log)" rows are the elapsed= that tarmount logs itself (without process start and the mount's first answer).
EOF
if [[ -z "$RATAR" ]]; then echo "ratarmount: $RATAR_STATUS" >>"$NOTES"; fi
for p in $PROFILES; do
	echo "server totals, $p: $(curl -s -m 5 "${BASE[$p]}/-/stats" || echo unavailable)" >>"$NOTES"
done

cp "$RUNS_TSV" "$OUT/runs.tsv"
for p in $PROFILES; do cp "$WORK/server-$p.log" "$OUT/server-$p.log"; done
"$BENCH" report -in "$RUNS_TSV" -meta "$META" -notes "$NOTES" -md "$OUT/bench-core.md" -json "$OUT/bench-core.json"
say "wrote $OUT/bench-core.md, $OUT/bench-core.json, $OUT/runs.tsv and $OUT/server-*.log (every request)"
