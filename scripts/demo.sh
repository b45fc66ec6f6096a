#!/usr/bin/env bash
# tarmount on a built-in example, start to finish:
#   installs what it lacks (scripts/deps.sh demo: fuse3, GNU tar and gzip, curl
#   and the Go modules, nothing the tests alone need), builds tarmount and the test HTTP server, makes a small sample tree and
#   sample.tar.gz with GNU tar, serves it on 127.0.0.1, mounts
#   http://127.0.0.1:PORT/sample.tar.gz, reads from the mount (a listing, a text
#   file, a 20 MiB file checked by sha256), then stops tarmount with SIGTERM
#   and checks that it unmounted. Everything lives in one temporary directory
#   that is removed at the end. Exits non-zero on any failure.
#
#   bash scripts/demo.sh          # needs root (or FUSE rights) and /dev/fuse
#   TARMOUNT_BIN=path/to/tarmount bash scripts/demo.sh   # use a built binary
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '==> %s\n' "$*"; }
die() {
	printf 'demo.sh: FAILED: %s\n' "$*" >&2
	exit 1
}

# is_mounted, wait_pid
. scripts/lib.sh

WORK="$(mktemp -d "${TMPDIR:-/tmp}/tarmount-demo.XXXXXX")"
MNT="$WORK/mnt"
BIN="$WORK/bin/tarmount"
SERVER_BIN="$WORK/bin/httpserve"
server_pid=""
mount_pid=""

cleanup() {
	local status=$?
	trap - EXIT INT TERM
	if [[ -n "$mount_pid" ]] && kill -0 "$mount_pid" 2>/dev/null; then
		kill -TERM "$mount_pid" 2>/dev/null || true
		wait_pid "$mount_pid" 10 || kill -KILL "$mount_pid" 2>/dev/null || true
	fi
	if is_mounted "$MNT"; then
		fusermount3 -u -z "$MNT" 2>/dev/null || umount -l "$MNT" 2>/dev/null || true
	fi
	if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
		kill -TERM "$server_pid" 2>/dev/null || true
		wait_pid "$server_pid" 10 || kill -KILL "$server_pid" 2>/dev/null || true
	fi
	if is_mounted "$MNT"; then
		echo "demo.sh: $MNT is still mounted; leaving $WORK in place" >&2
	else
		rm -rf "$WORK"
	fi
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

say "checking dependencies (scripts/deps.sh demo)"
bash scripts/deps.sh demo

say "building tarmount and httpserve"
mkdir -p "$WORK/bin" "$MNT" "$WORK/srv" "$WORK/cache"
if [[ -n "${TARMOUNT_BIN:-}" ]]; then
	BIN="$(cd "$(dirname "$TARMOUNT_BIN")" && pwd)/$(basename "$TARMOUNT_BIN")"
	[[ -x "$BIN" ]] || die "TARMOUNT_BIN=$TARMOUNT_BIN is not executable"
else
	go build -buildvcs=auto -o "$BIN" ./cmd/tarmount || die "go build ./cmd/tarmount"
fi
go build -o "$SERVER_BIN" ./scripts/httpserve || die "go build ./scripts/httpserve"

say "making a sample tree and sample.tar.gz"
S="$WORK/sample"
mkdir -p "$S/docs/nested/deep" "$S/src" "$S/data" "$S/empty"
printf 'Hello from tarmount!\nThis file was read through a FUSE mount of a remote tar.gz.\n' >"$S/README.txt"
printf 'Guide, version 1\n' >"$S/docs/guide.txt"
printf 'deep notes\n' >"$S/docs/nested/deep/notes.txt"
printf '#include <stdio.h>\nint main(void) { puts("hi"); return 0; }\n' >"$S/src/main.c"
ln -s guide.txt "$S/docs/latest"
ln "$S/src/main.c" "$S/src/main-hardlink.c"
# About 20 MiB of pseudo-random but compressible text (fixed seed).
awk -v bytes=$((20 * 1024 * 1024)) 'BEGIN {
	srand(42); n = 0
	nw = split("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau upsilon phi chi psi omega tar mount lazy range read block index span gzip zstd", w, " ")
	while (n < bytes) {
		line = sprintf("%08d", int(rand() * 100000000))
		for (i = 0; i < 10; i++) line = line " " w[1 + int(rand() * nw)]
		print line; n += length(line) + 1
	}
}' >"$S/data/big.txt"
tar --format=posix -C "$S" -czf "$WORK/srv/sample.tar.gz" .
echo "    $(du -h "$WORK/srv/sample.tar.gz" | cut -f1) archive of $(du -sh "$S" | cut -f1)"

say "serving it on 127.0.0.1"
"$SERVER_BIN" -addr 127.0.0.1:0 -dir "$WORK/srv" >"$WORK/server.out" 2>"$WORK/server.log" &
server_pid=$!
base=""
for _ in $(seq 100); do
	line="$(head -n 1 "$WORK/server.out" 2>/dev/null || true)"
	if [[ "$line" == "listening on http://"* ]]; then
		base="${line#listening on }"
		break
	fi
	kill -0 "$server_pid" 2>/dev/null || die "httpserve exited: $(cat "$WORK/server.log")"
	sleep 0.1
done
[[ -n "$base" ]] || die "httpserve did not print its address within 10 s"
URL="$base/sample.tar.gz"
echo "    $URL"

say "mounting: tarmount $URL $MNT"
"$BIN" "$URL" "$MNT" --cache-dir "$WORK/cache" >"$WORK/tarmount.log" 2>&1 &
mount_pid=$!
for _ in $(seq 300); do
	is_mounted "$MNT" && break
	if ! kill -0 "$mount_pid" 2>/dev/null; then
		cat "$WORK/tarmount.log" >&2
		die "tarmount exited before the mount appeared"
	fi
	sleep 0.1
done
if ! is_mounted "$MNT"; then
	cat "$WORK/tarmount.log" >&2
	die "the mount did not appear in /proc/mounts within 30 s"
fi

say "ls -lR (first lines)"
ls -lR "$MNT" >"$WORK/ls.txt" || die "ls -lR $MNT"
head -n 15 "$WORK/ls.txt"

say "cat README.txt"
cat "$MNT/README.txt" || die "cat README.txt"
cmp -s "$S/README.txt" "$MNT/README.txt" || die "README.txt differs from the original"
[[ "$(readlink "$MNT/docs/latest")" == "guide.txt" ]] || die "docs/latest: symlink target differs"
cmp -s "$S/src/main.c" "$MNT/src/main-hardlink.c" || die "src/main-hardlink.c differs from the original"

say "sha256sum data/big.txt (20 MiB)"
want="$(sha256sum <"$S/data/big.txt" | cut -d' ' -f1)"
got="$(sha256sum <"$MNT/data/big.txt" | cut -d' ' -f1)" || die "reading data/big.txt"
echo "    $got"
[[ "$got" == "$want" ]] || die "sha256 of data/big.txt: got $got, want $want"
stats="$(curl -sf "$base/-/stats" || true)"
[[ -z "$stats" ]] || echo "    server: $stats"

say "stopping tarmount (SIGTERM)"
kill -TERM "$mount_pid"
if ! wait_pid "$mount_pid" 30; then
	cat "$WORK/tarmount.log" >&2
	die "tarmount did not exit within 30 s of SIGTERM"
fi
mount_status=0
wait "$mount_pid" || mount_status=$?
mount_pid=""
if ((mount_status != 0)); then
	cat "$WORK/tarmount.log" >&2
	die "tarmount exited with status $mount_status after SIGTERM"
fi
is_mounted "$MNT" && die "$MNT is still mounted after tarmount exited"

kill -TERM "$server_pid"
wait "$server_pid" || true
server_pid=""
say "OK: mounted, read and verified, unmounted cleanly"
