#!/usr/bin/env bash
# Installs what the tests or the demo need, and only what is missing.
#
# The tests (no argument; scripts/test.sh): fusermount3 (fuse3), pigz, bsdtar
#   (libarchive-tools), setfattr/getfattr (attr), curl, GNU tar and gzip, and the
#   zstd, pzstd (zstd), lz4, bzip2, pbzip2, lbzip2 and xz (xz-utils) CLIs that make
#   the codec tests' archives, tinyproxy (tinyproxy-bin: the binary alone, no
#   service) for the proxy test; then downloads the Go modules and builds versitygw
#   (scripts/versitygw.sh, a few minutes once per machine) into the user's cache
#   directory.
# The demo (argument "demo"; scripts/demo.sh): fusermount3 (fuse3), GNU tar and
#   gzip, curl, and the Go modules. No versitygw: the demo serves over HTTP.
# Idempotent and quiet on success; on failure it prints the installer's output
# and exits (or returns, when sourced) non-zero. With TARMOUNT_DEPS_DRY_RUN=1 it
# installs nothing and prints what it would do, one step a line.
#
#   bash scripts/deps.sh        # run
#   bash scripts/deps.sh demo   # only what the demo needs
#   source scripts/deps.sh      # or source it from another bash script
#   TARMOUNT_DEPS_DRY_RUN=1 bash scripts/deps.sh demo   # the steps, without taking them

tarmount_deps() (
	set -euo pipefail
	local root
	root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
	local set="${1:-tests}"
	local dry="${TARMOUNT_DEPS_DRY_RUN:-}"

	# command -> Debian package
	local -A pkg_of=(
		[fusermount3]=fuse3
		[curl]=curl
		[tar]=tar
		[gzip]=gzip
	)
	case "$set" in
	demo) ;;
	tests)
		pkg_of+=(
			[pigz]=pigz
			[bsdtar]=libarchive-tools
			[setfattr]=attr
			[getfattr]=attr
			[zstd]=zstd
			[pzstd]=zstd
			[lz4]=lz4
			[bzip2]=bzip2
			[pbzip2]=pbzip2
			[lbzip2]=lbzip2
			[xz]=xz-utils
			[tinyproxy]=tinyproxy-bin
		)
		;;
	*)
		echo "deps.sh: unknown set $set (want demo, or nothing for the tests)" >&2
		return 1
		;;
	esac
	local -a missing=()
	local cmd p
	for cmd in "${!pkg_of[@]}"; do
		if [[ -n "$dry" ]] || ! command -v "$cmd" >/dev/null 2>&1; then
			p="${pkg_of[$cmd]}"
			[[ " ${missing[*]-} " == *" $p "* ]] || missing+=("$p")
		fi
	done

	if [[ -n "$dry" ]]; then
		local -a sorted
		mapfile -t sorted < <(printf '%s\n' "${missing[@]}" | sort)
		echo "apt-get install (when missing): ${sorted[*]}"
	elif ((${#missing[@]})); then
		local sudo=()
		if ((EUID != 0)); then
			if command -v sudo >/dev/null 2>&1; then
				sudo=(sudo)
			else
				echo "deps.sh: need root (or sudo) to install: ${missing[*]}" >&2
				return 1
			fi
		fi
		if ! command -v apt-get >/dev/null 2>&1; then
			echo "deps.sh: apt-get not found; install these packages by hand: ${missing[*]}" >&2
			return 1
		fi
		local log
		log="$(mktemp)"
		# One apt-get update, then one install of everything missing.
		if ! "${sudo[@]}" apt-get update -q >"$log" 2>&1 ||
			! "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
				apt-get install -y -q --no-install-recommends "${missing[@]}" >>"$log" 2>&1; then
			cat "$log" >&2
			rm -f "$log"
			echo "deps.sh: installing ${missing[*]} failed" >&2
			return 1
		fi
		rm -f "$log"
		for cmd in "${!pkg_of[@]}"; do
			if ! command -v "$cmd" >/dev/null 2>&1; then
				echo "deps.sh: $cmd still missing after installing ${pkg_of[$cmd]}" >&2
				return 1
			fi
		done
	fi

	if ! command -v go >/dev/null 2>&1; then
		echo "deps.sh: go not found in PATH" >&2
		return 1
	fi
	cd "$root"
	if [[ -n "$dry" ]]; then
		echo "go mod download"
	else
		local out
		if ! out="$(go mod download 2>&1)"; then
			printf '%s\n' "$out" >&2
			echo "deps.sh: go mod download failed" >&2
			return 1
		fi
	fi
	if [[ "$set" == tests ]]; then
		# The S3-compatible server of the s3:// tests, built once per machine.
		if [[ -n "$dry" ]]; then
			echo "bash scripts/versitygw.sh"
		else
			bash scripts/versitygw.sh >/dev/null
		fi
	fi
)

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
	tarmount_deps "$@"
	exit $?
else
	tarmount_deps "$@"
	return $?
fi
