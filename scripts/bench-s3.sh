#!/usr/bin/env bash
# Index pass throughput over S3 vs HTTP: `tarmount index URL` of the same
# archive from versitygw (s3://, loopback) and from scripts/httpserve
# (http://, loopback), unshaped, each with a fresh cache directory.
#
#   bash scripts/bench-s3.sh [RUNS]        # default 3 runs per case
#
# Dataset: the Go toolchain tree of `go env GOROOT` as go.tar and go.tar.gz
# (gzip -6). Prints one line per run and the median per case: wall time,
# CPU time of tarmount, MB/s of the object, MB/s of tar, and bytes fetched
# (from tarmount's log). Servers and tarmount share the machine's cores.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

runs="${1:-3}"
access=benchroot
secret=bench-root-secret-key
vgw="$(bash scripts/versitygw.sh)"
work="$(mktemp -d)"
vgw_pid=""
http_pid=""
cleanup() {
	[[ -z "$vgw_pid" ]] || kill "$vgw_pid" 2>/dev/null || true
	[[ -z "$http_pid" ]] || kill "$http_pid" 2>/dev/null || true
	[[ -z "$vgw_pid" ]] || wait_pid "$vgw_pid" 10 || true
	[[ -z "$http_pid" ]] || wait_pid "$http_pid" 10 || true
	rm -rf "$work"
}
trap cleanup EXIT

go build -o "$work/tarmount" ./cmd/tarmount
go build -o "$work/httpserve" ./scripts/httpserve

mkdir -p "$work/data" "$work/s3"
goroot="$(go env GOROOT)"
tar -C "$(dirname "$goroot")" -cf "$work/data/go.tar" "$(basename "$goroot")"
gzip -6 -c "$work/data/go.tar" >"$work/data/go.tar.gz"
tar_bytes=$(stat -c %s "$work/data/go.tar")

# versitygw on a free port of 127.0.0.1 (picked at random, tried again if
# taken), with keep-alive as S3 has.
for _ in 1 2 3 4 5; do
	port=$((20000 + RANDOM % 40000))
	ROOT_ACCESS_KEY="$access" ROOT_SECRET_KEY="$secret" "$vgw" --port "127.0.0.1:$port" \
		--health /health --quiet --keep-alive posix "$work/s3" >"$work/vgw.log" 2>&1 &
	vgw_pid=$!
	for _ in $(seq 100); do
		curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
		kill -0 "$vgw_pid" 2>/dev/null || break
		sleep 0.05
	done
	curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
	kill "$vgw_pid" 2>/dev/null || true
	vgw_pid=""
done
[[ -n "$vgw_pid" ]] || { echo "bench-s3.sh: versitygw did not start: $(tail -3 "$work/vgw.log")" >&2; exit 1; }
endpoint="http://127.0.0.1:$port"

# Upload with PutObject (curl signs with SigV4).
s3curl() { curl -sf --aws-sigv4 "aws:amz:us-east-1:s3" --user "$access:$secret" -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" "$@"; }
s3curl -X PUT "$endpoint/bench" >/dev/null
for f in go.tar go.tar.gz; do
	s3curl -T "$work/data/$f" "$endpoint/bench/$f" >/dev/null
done

"$work/httpserve" -addr 127.0.0.1:0 -dir "$work/data" >"$work/http.out" 2>"$work/http.log" &
http_pid=$!
for _ in $(seq 100); do
	[[ -s "$work/http.out" ]] && break
	sleep 0.05
done
http_base="$(head -1 "$work/http.out" | sed 's/^listening on //')"

export AWS_ACCESS_KEY_ID="$access" AWS_SECRET_ACCESS_KEY="$secret" AWS_EC2_METADATA_DISABLED=true
export AWS_CONFIG_FILE=/dev/null AWS_SHARED_CREDENTIALS_FILE=/dev/null
unset AWS_PROFILE AWS_REGION AWS_DEFAULT_REGION AWS_ENDPOINT_URL AWS_ENDPOINT_URL_S3

echo "dataset: $goroot as go.tar ($tar_bytes bytes) and go.tar.gz ($(stat -c %s "$work/data/go.tar.gz") bytes); $(nproc) cores"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg) (other processes share the cores: compare medians)"
printf '%-12s %-5s %4s %8s %8s %10s %10s %12s\n' file via run seconds "cpu s" "obj MB/s" "tar MB/s" fetched
declare -A times cpus
for f in go.tar.gz go.tar; do
	obj_bytes=$(stat -c %s "$work/data/$f")
	for via in s3 http; do
		for run in $(seq "$runs"); do
			if [[ $via == s3 ]]; then
				args=("s3://bench/$f" --endpoint-url "$endpoint")
			else
				args=("$http_base/$f")
			fi
			rm -rf "$work/cache"
			# real, user and system seconds of tarmount alone
			TIMEFORMAT='%R %U %S'
			{ time "$work/tarmount" index "${args[@]}" --cache-dir "$work/cache" 2>"$work/index.log" ||
				{ echo "tarmount index failed:" >&2; tail -5 "$work/index.log" >&2; exit 1; }; } 2>"$work/time"
			read -r secs user sys <"$work/time"
			fetched=$(grep -o 'fetched=[0-9]*' "$work/index.log" | tail -1 | cut -d= -f2)
			times[$f.$via]+="$secs "
			cpus[$f.$via]+="$(awk -v u="$user" -v s="$sys" 'BEGIN { printf "%.3f", u + s }') "
			awk -v f="$f" -v via="$via" -v run="$run" -v s="$secs" -v u="$user" -v y="$sys" -v o="$obj_bytes" -v t="$tar_bytes" -v fe="${fetched:-?}" \
				'BEGIN { printf "%-12s %-5s %4d %8.3f %8.3f %10.1f %10.1f %12s\n", f, via, run, s, u + y, o / s / 1e6, t / s / 1e6, fe }'
		done
	done
done
median() { tr ' ' '\n' <<<"$1" | grep . | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
echo "medians:"
for f in go.tar.gz go.tar; do
	obj_bytes=$(stat -c %s "$work/data/$f")
	for via in s3 http; do
		med=$(median "${times[$f.$via]}")
		cpu=$(median "${cpus[$f.$via]}")
		awk -v f="$f" -v via="$via" -v s="$med" -v c="$cpu" -v o="$obj_bytes" -v t="$tar_bytes" \
			'BEGIN { printf "%-12s %-5s %8.3f s %8.1f MB/s object %8.1f MB/s tar, tarmount cpu %.3f s\n", f, via, s, o / s / 1e6, t / s / 1e6, c }'
	done
done
