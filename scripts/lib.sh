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
