#!/usr/bin/env bash
# HTTP/2 against HTTP/1.1 for tarmount's fetches, over HTTPS on loopback
# shaped like distant object storage: 20 ms to the first byte of every
# response, 40 ms to set up each connection, 80 MB/s per connection as a
# whole (so HTTP/2 requests that share a connection share its 80 MB/s).
#
# Measures the index pass (`tarmount index URL`) of a tar.gz of the Go
# toolchain with the default client (HTTP/2 spread over --fetch-workers
# connections), with --http1, and with one HTTP/2 connection
# (--fetch-workers 1 is not that: it also stops parallel fetching, so the
# one-connection case is the Go benchmark BenchmarkHTTPProtocols); the peer
# is curl | gzip -d over the same server (curl speaks HTTP/2 on one
# connection). Prints a markdown table of medians and min-max over RUNS
# runs, alternating the tools, with the connections and bytes the server
# saw.
#
#   bash scripts/bench-http2.sh
#   RUNS=5 bash scripts/bench-http2.sh
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."
source scripts/lib.sh

RUNS="${RUNS:-3}"
SCRATCH="${SCRATCH:-${TMPDIR:-/tmp}/tarmount-bench}"
mkdir -p "$SCRATCH"
WORK="$(mktemp -d "$SCRATCH/h2.XXXXXX")"
DATA="$SCRATCH/go.tar.gz"
if [[ ! -s "$DATA" ]]; then
	goroot="$(go env GOROOT)"
	echo "==> making $DATA from $goroot (once)" >&2
	tar -C "$goroot/.." -czf "$DATA.tmp" "$(basename "$goroot")"
	mv "$DATA.tmp" "$DATA"
fi
mkdir -p "$WORK/srv"
ln -f "$DATA" "$WORK/srv/go.tar.gz" 2>/dev/null || cp "$DATA" "$WORK/srv/go.tar.gz"

go build -o "$WORK/tarmount" ./cmd/tarmount
go build -o "$WORK/httpserve" ./scripts/httpserve

"$WORK/httpserve" -dir "$WORK/srv" -tls "$WORK/cert.pem" -latency 20ms -conn-rate 80MB -handshake 40ms \
	>"$WORK/server.out" 2>"$WORK/server.log" &
SERVER=$!
trap 'kill "$SERVER" 2>/dev/null; wait "$SERVER" 2>/dev/null; rm -rf "$WORK"' EXIT
for _ in $(seq 100); do
	grep -q '^listening on ' "$WORK/server.out" 2>/dev/null && break
	sleep 0.05
done
BASEURL="$(sed -n 's/^listening on //p' "$WORK/server.out")"
URL="$BASEURL/go.tar.gz"
export SSL_CERT_FILE="$WORK/cert.pem"
size=$(stat -c %s "$DATA")

stats() { curl -s --cacert "$SSL_CERT_FILE" "$BASEURL/-/stats"; }
# run NAME CMD...: times CMD, and records seconds, requests and bytes served.
run() {
	local name=$1
	shift
	local before after t0 t1
	before=$(stats)
	t0=$(date +%s.%N)
	"$@" >/dev/null 2>"$WORK/step.err" || {
		cat "$WORK/step.err" >&2
		exit 1
	}
	t1=$(date +%s.%N)
	after=$(stats)
	python3 - "$name" "$t0" "$t1" "$before" "$after" >>"$WORK/runs.tsv" <<'PY'
import json, sys
name, t0, t1, b, a = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), json.loads(sys.argv[4]), json.loads(sys.argv[5])
print(f"{name}\t{t1-t0:.3f}\t{a['requests']-b['requests']}\t{a['bytes']-b['bytes']}")
PY
}

for i in $(seq "$RUNS"); do
	echo "==> run $i/$RUNS" >&2
	order=(http2 http1 curl)
	((i % 2 == 0)) && order=(curl http1 http2)
	for tool in "${order[@]}"; do
		rm -rf "$WORK/cache"
		case $tool in
		http2) run "tarmount (HTTP/2, 8 connections)" "$WORK/tarmount" index "$URL" -o "$WORK/i.idx" --cache-dir "$WORK/cache" --cache-disk 0 ;;
		http1) run "tarmount --http1 (8 connections)" "$WORK/tarmount" index "$URL" -o "$WORK/i.idx" --cache-dir "$WORK/cache" --cache-disk 0 --http1 ;;
		curl) run "curl, gzip -d (HTTP/2, 1 connection)" bash -c 'curl -sSf --http2 --cacert "$SSL_CERT_FILE" "$1" | gzip -d >/dev/null' _ "$URL" ;;
		esac
	done
done

python3 - "$WORK/runs.tsv" "$size" <<'PY'
import statistics, sys, collections
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    name, t, req, b = line.rstrip("\n").split("\t")
    runs[name].append((float(t), int(req), int(b)))
size = int(sys.argv[2])
print(f"Index pass of the Go toolchain tar.gz ({size/1e6:.1f} MB) over HTTPS, 20 ms first byte, 40 ms connection set-up, 80 MB/s per connection\n")
print("| tool | median s | min-max s | MB/s | requests | bytes / size |")
print("|---|---|---|---|---|---|")
for name, rs in runs.items():
    ts = [r[0] for r in rs]
    med = statistics.median(ts)
    print(f"| {name} | {med:.2f} | {min(ts):.2f}-{max(ts):.2f} | {size/med/1e6:.0f} | {rs[-1][1]} | {rs[-1][2]/size:.3f} |")
PY
