# Shell helpers shared by the scripts; source it: . "$(dirname "$0")/lib.sh"

# is_mounted DIR: DIR is a mountpoint in /proc/mounts (paths from mktemp
# need no unescaping).
is_mounted() {
	awk -v m="$1" '$2 == m { found = 1 } END { exit !found }' /proc/mounts
}

# wait_pid PID SECONDS: wait until PID exits, at most SECONDS; 1 if it did not.
wait_pid() {
	local pid=$1 deadline=$((SECONDS + $2))
	while kill -0 "$pid" 2>/dev/null; do
		((SECONDS < deadline)) || return 1
		sleep 0.05
	done
}

# serve_objstore BIN DIR LOG: start scripts/httpserve (built at BIN) on DIR,
# on 127.0.0.1 shaped like object storage (20 ms to first byte, 80 MB/s
# per connection), logging to LOG; sets SERVER_PID and BASE (its URL).
# Returns 1 if it does not say where it listens within 5 s.
serve_objstore() {
	"$1" -dir "$2" -addr 127.0.0.1:0 -latency 20ms -rate 80MB >"$3" 2>&1 &
	SERVER_PID=$!
	for _ in $(seq 100); do
		grep -q 'listening on' "$3" 2>/dev/null && break
		sleep 0.05
	done
	BASE="$(grep -o 'http://127.0.0.1:[0-9]*' "$3" | head -1)"
	[[ -n "$BASE" ]]
}
