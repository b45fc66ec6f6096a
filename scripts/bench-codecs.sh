#!/usr/bin/env bash
# Measurements per codec, with each codec's CLI as the peer in the same run:
#   1. index pass of the local file (tarmount index FILE, a fresh cache
#      each run), in MB/s of tar output, vs the CLI decoding the same file
#      to /dev/null (gzip -d, zstd -d, lz4 -d, bzip2 -d, xz -d);
#   2. cold read of a small file (SMALL_FILE) over loopback HTTP shaped like
#      object storage (httpserve -latency 20ms -rate 80MB): a fresh mount
#      with the saved index, no disk cache, then one cat; the time of the
#      cat and the bytes and requests the server counted for it.
# Stream-only codecs (single-frame zstd, single-block xz) read from their decoded
# copy on disk, so their cold read fetches nothing: the cost is in the
# index pass, which writes that copy.
#
# Dataset: the Go toolchain of this machine as a tar (made once in the
# scratch dir), compressed with gzip -6, zstd -3 (one frame), pzstd -3
# (frames), tarmount pack (seekable zstd with the index embedded), lz4
# (CLI default), bzip2 -9, pbzip2 -9 (a stream per 900 kB block), xz -6 -T2
# (24 MiB blocks) and xz -6 -T2 --block-size=4MiB.
#
# Output: a markdown table on stdout and in $SCRATCH/bench-codecs.md; every
# run in $SCRATCH/runs.tsv; progress on stderr.
#
#   bash scripts/bench-codecs.sh          # needs root (or FUSE rights) and /dev/fuse
#   RUNS=5 bash scripts/bench-codecs.sh
#
# Environment: RUNS=3, SCRATCH=${TMPDIR:-/tmp}/tarmount-bench-codecs,
# SMALL_FILE=go/src/net/http/server.go, CODECS="gz zst pzstd packed lz4 bz2 xz"
# (also pbz2 and xz4m).
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."

RUNS="${RUNS:-3}"
SCRATCH="${SCRATCH:-${TMPDIR:-/tmp}/tarmount-bench-codecs}"
SMALL_FILE="${SMALL_FILE:-go/src/net/http/server.go}"
CODECS="${CODECS:-gz zst pzstd packed lz4 bz2 xz}"

say() { printf '==> %s\n' "$*" >&2; }
die() {
	printf 'bench-codecs.sh: FAILED: %s\n' "$*" >&2
	exit 1
}

mkdir -p "$SCRATCH/bin" "$SCRATCH/srv"
BIN="$SCRATCH/bin"
say "building tarmount and httpserve"
go build -o "$BIN/tarmount" ./cmd/tarmount
go build -o "$BIN/httpserve" ./scripts/httpserve
TM="$BIN/tarmount"

# The dataset, once.
TAR="$SCRATCH/go.tar"
if [[ ! -s "$TAR" ]]; then
	say "making $TAR from $(go env GOROOT)"
	tar -C "$(go env GOROOT)/.." -cf "$TAR.tmp" "$(basename "$(go env GOROOT)")"
	mv "$TAR.tmp" "$TAR"
fi
TAR_BYTES=$(stat -c %s "$TAR")
declare -A FILE=([gz]=go.tar.gz [zst]=go.tar.zst [pzstd]=go.pzstd.tar.zst [packed]=go.packed.tar.zst
	[lz4]=go.tar.lz4 [bz2]=go.tar.bz2 [pbz2]=go.pbzip2.tar.bz2 [xz]=go.tar.xz [xz4m]=go.4m.tar.xz)
declare -A MAKE=([gz]="gzip -6 -n -c" [zst]="zstd -3 -q -c" [pzstd]="pzstd -3 -p 2 -q -c"
	[lz4]="lz4 -q -c" [bz2]="bzip2 -9 -c" [pbz2]="pbzip2 -p2 -9 -c" [xz]="xz -6 -T2 -c"
	[xz4m]="xz -6 -T2 --block-size=4MiB -c")
declare -A PEER=([gz]="gzip -d -c" [zst]="zstd -d -q -c" [pzstd]="zstd -d -q -c" [packed]="zstd -d -q -c"
	[lz4]="lz4 -d -q -c" [bz2]="bzip2 -d -c" [pbz2]="bzip2 -d -c" [xz]="xz -d -c" [xz4m]="xz -d -c")
for c in $CODECS; do
	f="$SCRATCH/srv/${FILE[$c]}"
	[[ -s "$f" ]] && continue
	say "making $f"
	if [[ "$c" == packed ]]; then
		"$TM" pack "$TAR" -o "$f" --cache-dir "$SCRATCH/packcache" 2>/dev/null
	else
		${MAKE[$c]} <"$TAR" >"$f.tmp"
		mv "$f.tmp" "$f"
	fi
done

now() { date +%s.%N; }
median() { sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
RUNS_TSV="$SCRATCH/runs.tsv"
printf 'codec\twhat\trun\tseconds\tbytes\trequests\n' >"$RUNS_TSV"

say "serving $SCRATCH/srv on 127.0.0.1 as object storage (20 ms first byte, 80 MB/s per connection)"
"$BIN/httpserve" -addr 127.0.0.1:0 -dir "$SCRATCH/srv" -latency 20ms -rate 80MB >"$SCRATCH/server.out" 2>"$SCRATCH/server.log" &
SERVER_PID=$!
MNT="$(mktemp -d)"
cleanup() {
	mountpoint -q "$MNT" && { umount "$MNT" 2>/dev/null || umount -l "$MNT"; }
	kill "$SERVER_PID" 2>/dev/null || true
	wait "$SERVER_PID" 2>/dev/null || true
	rmdir "$MNT" 2>/dev/null || true
}
trap cleanup EXIT
BASE=""
for _ in $(seq 100); do
	line="$(head -n 1 "$SCRATCH/server.out" 2>/dev/null || true)"
	[[ "$line" == "listening on http://"* ]] && BASE="${line#listening on }" && break
	sleep 0.1
done
[[ -n "$BASE" ]] || die "httpserve did not start: $(cat "$SCRATCH/server.log")"
stats() { curl -s "$BASE/-/stats" | python3 -c 'import json,sys; s=json.load(sys.stdin); print(s["bytes"], s["requests"])'; }

for c in $CODECS; do
	f="$SCRATCH/srv/${FILE[$c]}"
	for r in $(seq "$RUNS"); do
		# Alternate which goes first.
		for who in $( ((r % 2)) && echo "tarmount peer" || echo "peer tarmount"); do
			if [[ "$who" == tarmount ]]; then
				rm -rf "$SCRATCH/idx"
				t0=$(now)
				"$TM" index "$f" --cache-dir "$SCRATCH/idx" 2>"$SCRATCH/index.log" || die "tarmount index $f: $(cat "$SCRATCH/index.log")"
				t1=$(now)
				printf '%s\tindex\t%d\t%s\t\t\n' "$c" "$r" "$(echo "$t1 - $t0" | bc -l)" >>"$RUNS_TSV"
			else
				t0=$(now)
				${PEER[$c]} "$f" >/dev/null
				t1=$(now)
				printf '%s\tpeer\t%d\t%s\t\t\n' "$c" "$r" "$(echo "$t1 - $t0" | bc -l)" >>"$RUNS_TSV"
			fi
		done
	done
	say "$c: index pass done"

	# Cold reads: one index over HTTP, then fresh mounts that load it.
	url="$BASE/${FILE[$c]}"
	cache="$SCRATCH/cache-$c"
	rm -rf "$cache"
	"$TM" index "$url" --cache-dir "$cache" --cache-disk 0 2>"$SCRATCH/index-http.log" || die "tarmount index $url"
	for r in $(seq "$RUNS"); do
		"$TM" "$url" "$MNT" --cache-dir "$cache" --cache-disk 0 2>"$SCRATCH/mount.log" &
		pid=$!
		for _ in $(seq 600); do
			grep -q "msg=ready" "$SCRATCH/mount.log" && break
			kill -0 "$pid" 2>/dev/null || die "mount of $url failed: $(cat "$SCRATCH/mount.log")"
			sleep 0.05
		done
		read -r b0 q0 <<<"$(stats)"
		t0=$(now)
		cat "$MNT/$SMALL_FILE" >/dev/null
		t1=$(now)
		read -r b1 q1 <<<"$(stats)"
		printf '%s\tcold\t%d\t%s\t%d\t%d\n' "$c" "$r" "$(echo "$t1 - $t0" | bc -l)" $((b1 - b0)) $((q1 - q0)) >>"$RUNS_TSV"
		kill -TERM "$pid"
		wait "$pid" || true
	done
	say "$c: cold reads done"
done

{
	echo "Dataset: the Go toolchain as a tar ($TAR_BYTES bytes). Medians of $RUNS runs; the index pass and the CLI alternate."
	echo "Cold read: $SMALL_FILE through a fresh mount with the saved index, over 127.0.0.1 shaped as object storage (20 ms to first byte, 80 MB/s per connection), no disk cache."
	echo
	echo "| codec | file bytes | index pass MB/s (tar) | CLI -d MB/s (same run) | cold read s | bytes fetched | requests |"
	echo "|---|---|---|---|---|---|---|"
	for c in $CODECS; do
		f="$SCRATCH/srv/${FILE[$c]}"
		ti=$(awk -F'\t' -v c="$c" '$1==c && $2=="index" {print $4}' "$RUNS_TSV" | median)
		tp=$(awk -F'\t' -v c="$c" '$1==c && $2=="peer" {print $4}' "$RUNS_TSV" | median)
		tc=$(awk -F'\t' -v c="$c" '$1==c && $2=="cold" {print $4}' "$RUNS_TSV" | median)
		bc_=$(awk -F'\t' -v c="$c" '$1==c && $2=="cold" {print $5}' "$RUNS_TSV" | median)
		rq=$(awk -F'\t' -v c="$c" '$1==c && $2=="cold" {print $6}' "$RUNS_TSV" | median)
		printf '| %s (%s) | %d | %.0f | %.0f (%s) | %.3f | %s | %s |\n' "$c" "${FILE[$c]}" "$(stat -c %s "$f")" \
			"$(echo "$TAR_BYTES / $ti / 1000000" | bc -l)" "$(echo "$TAR_BYTES / $tp / 1000000" | bc -l)" "${PEER[$c]%% *}" \
			"$tc" "$bc_" "$rq"
	done
} | tee "$SCRATCH/bench-codecs.md"
