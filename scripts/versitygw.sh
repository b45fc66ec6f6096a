#!/usr/bin/env bash
# Installs versitygw (an S3-compatible server over a local directory, used by
# the s3:// tests) once per machine, and prints the path of its binary.
#
# The binary lives outside the clone, in
#   ${XDG_CACHE_HOME:-$HOME/.cache}/tarmount-tools/bin/versitygw
# so that every clone and worktree shares it. The first install builds it
# from the Go module proxy and takes a few minutes; later runs only check that
# it is there. The tests find it in the same place (or in $TARMOUNT_VERSITYGW).
#
#   bash scripts/versitygw.sh          # install if missing; print the path
#   bin="$(bash scripts/versitygw.sh)"
set -euo pipefail

version=v1.8.0
bindir="${XDG_CACHE_HOME:-$HOME/.cache}/tarmount-tools/bin"
bin="$bindir/versitygw"

if [[ ! -x "$bin" ]]; then
	if ! command -v go >/dev/null 2>&1; then
		echo "versitygw.sh: go not found in PATH" >&2
		exit 1
	fi
	mkdir -p "$bindir"
	echo "versitygw.sh: building versitygw $version into $bindir (once per machine; about 3.5 min)" >&2
	start=$SECONDS
	log="$(mktemp)"
	# Outside any module, so that the clone's go.mod is not consulted.
	if ! (cd "$bindir" && GOBIN="$bindir" GOWORK=off \
		go install "github.com/versity/versitygw/cmd/versitygw@$version") >"$log" 2>&1; then
		cat "$log" >&2
		rm -f "$log"
		echo "versitygw.sh: go install versitygw@$version failed" >&2
		exit 1
	fi
	rm -f "$log"
	echo "versitygw.sh: built in $((SECONDS - start)) s" >&2
fi
echo "$bin"
