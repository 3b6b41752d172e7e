#!/usr/bin/env bash
# gotest.sh is how make test builds and runs Go code: like go build -o and
# go test -count=1, except that the linked binaries outlive the run.
#
# go test caches test results but never linked test binaries: with
# -count=1 every run links every test binary again, which took a quarter
# of a warm make test's CPU time. cmd/go does skip a link whose output
# file already holds what the link would write (it compares build IDs, as
# go install does), so this script keeps the binaries in a cache folder
# and builds into hard links of them: what is up to date is not linked
# again, what is not is linked into this run's own file (cmd/go replaces
# a file, never writes into it), and the cache then takes the new file.
# Each run executes only its own files, which cmd/go checked against its
# own sources, so runs of different checkouts may share the cache.
#
#   gotest.sh build OUTDIR GO_BUILD_ARGS...
#       go build -o OUTDIR/ GO_BUILD_ARGS..., reusing binaries linked before.
#   gotest.sh test [-p N] [-run-flag FLAG]... -- GO_TEST_BUILD_FLAGS... -- PACKAGES...
#       go test -c each package (a package without test files is reported
#       as go test reports it), then run the binaries, N at a time, each in
#       its package's folder with the FLAGs (e.g. -test.timeout=15m),
#       printing ok/FAIL lines as go test does, and a failed package's
#       output. Exits 1 when any package failed or did not build.
#
# The cache folder is $GOTEST_BINARY_CACHE, by default
# $XDG_CACHE_HOME/acme-platform/test-binaries (~/.cache when unset);
# it holds one copy of each binary per set of flags (about 700 MB for make
# test's), and deleting it costs the next run its links, nothing else.
set -uo pipefail

cache_root=${GOTEST_BINARY_CACHE:-${XDG_CACHE_HOME:-${HOME:-/nonexistent}/.cache}/acme-platform/test-binaries}
# Without a writable cache folder (no home, a read-only one) the run still
# works, in a folder of its own, and links everything.
if ! mkdir -p "$cache_root" 2>/dev/null || ! [ -w "$cache_root" ]; then
	cache_root=$(mktemp -d) || exit
	trap 'rm -rf "$cache_root"' EXIT
fi
go=${GO:-go}

# cached_build CACHE_DIR OUT_DIR COMMAND...: runs COMMAND (which writes its
# binaries into OUT_DIR) after hard-linking CACHE_DIR's binaries into
# OUT_DIR, then gives CACHE_DIR the binaries of OUT_DIR. OUT_DIR must be on
# the cache's file system for the links; elsewhere everything is linked.
cached_build() {
	local cache=$1 out=$2
	shift 2
	mkdir -p "$cache" "$out" || return
	local f
	for f in "$cache"/*; do
		[ -f "$f" ] && ln -f "$f" "$out/" 2>/dev/null
	done
	"$@" || return
	for f in "$out"/*; do
		[ -f "$f" ] && ! [ "$f" -ef "$cache/${f##*/}" ] || continue
		# A rename replaces the cache's file at once: another run that
		# is linking it into its own folder gets the old or the new.
		ln -f "$f" "$cache/.${f##*/}.$$" 2>/dev/null && mv -f "$cache/.${f##*/}.$$" "$cache/${f##*/}" || rm -f "$cache/.${f##*/}.$$"
	done
	return 0
}

# key names the cache folder of a set of build flags (with $GOFLAGS, so
# that builds with other flags do not take turns replacing its files).
key() { printf '%s\n' "${GOFLAGS:-}" "$*" | sha256sum | cut -c1-16; }

build() {
	local out=$1
	shift
	local cache
	cache="$cache_root/build-$(key "$@")"
	cached_build "$cache" "$out" "$go" build -o "$out/" "$@"
}

test_packages() {
	local parallel=4 run_flags=()
	while [ $# -gt 0 ] && [ "$1" != -- ]; do
		case $1 in
		-p) parallel=$2; shift 2 ;;
		-run-flag) run_flags+=("$2"); shift 2 ;;
		*) echo "gotest.sh test: unknown flag $1" >&2; return 2 ;;
		esac
	done
	shift
	local build_flags=()
	while [ $# -gt 0 ] && [ "$1" != -- ]; do build_flags+=("$1"); shift; done
	shift
	local cache
	cache="$cache_root/test-$(key "${build_flags[@]}")"
	mkdir -p "$cache" || return
	local work
	work=$(mktemp -d "$cache/run.XXXXXX") || return
	# shellcheck disable=SC2064 # expand now: work is local
	trap "rm -rf '$work'" RETURN

	# Packages by test binary name (go test -c names it after the last
	# element of the import path): one go test -c per group of distinct
	# names, since a group writes into one folder.
	local listing
	listing=$("$go" list -f '{{.ImportPath}} {{.Dir}} {{if or .TestGoFiles .XTestGoFiles}}test{{else}}none{{end}}' "$@") || return
	local -A group_of=() taken=()
	local -a groups=() runs=()
	local pkg dir has g name
	while read -r pkg dir has; do
		if [ "$has" = none ]; then
			printf '?   \t%s\t[no test files]\n' "$pkg"
			continue
		fi
		name=${pkg##*/}
		g=0
		while [ -n "${taken[$g/$name]:-}" ]; do g=$((g + 1)); done
		taken[$g/$name]=1
		groups[g]="${groups[g]:-} $pkg"
		runs+=("$pkg $dir $work/g$g/$name.test")
	done <<<"$listing"
	local failed=0
	for g in "${!groups[@]}"; do
		# shellcheck disable=SC2086 # the group is a list of import paths
		cached_build "$cache/g$g" "$work/g$g" "$go" test -c "${build_flags[@]}" -o "$work/g$g/" ${groups[g]} || failed=1
	done
	[ "$failed" = 0 ] || { echo "FAIL	(build failed)"; return 1; }
	[ ${#runs[@]} -gt 0 ] || return 0

	export GOTEST_RUN_FLAGS="${run_flags[*]}" GOTEST_LOCK="$work/output.lock"
	printf '%s\n' "${runs[@]}" | xargs -d '\n' -P "$parallel" -n 1 bash -c '
		read -r pkg dir bin <<<"$1"
		out=$(mktemp)
		start=$(date +%s%N)
		# shellcheck disable=SC2086 # the flags are words
		(cd "$dir" && exec "$bin" -test.paniconexit0 $GOTEST_RUN_FLAGS) >"$out" 2>&1
		rc=$?
		ms=$((($(date +%s%N) - start) / 1000000))
		took=$((ms / 1000)).$(printf %03d $((ms % 1000)))
		{
			flock 9
			if [ $rc -eq 0 ]; then
				printf "ok  \t%s\t%ss\n" "$pkg" "$took"
			else
				cat "$out"
				printf "FAIL\t%s\t%ss\n" "$pkg" "$took"
			fi
		} 9>>"$GOTEST_LOCK"
		rm -f "$out"
		exit $((rc != 0))
	' _ || return 1
}

case ${1:-} in
build) shift; build "$@" ;;
test) shift; test_packages "$@" ;;
*) sed -n '2,/^set /p' "$0" | sed '$d'; exit 2 ;;
esac
