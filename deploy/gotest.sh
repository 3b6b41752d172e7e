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
#       go test -c the packages, in as few groups as their names allow (a
#       package without test files is reported as go test reports it), and
#       run each group's binaries as soon as it is built, N at a time, each
#       in its package's folder with the FLAGs (e.g. -test.timeout=15m),
#       printing ok/FAIL lines as go test does, and a failed package's
#       output. Exits 1 when any package failed or a group did not build
#       (its packages are not run).
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
		[ -f "$f" ] && cache_put "$f" "$cache/${f##*/}"
	done
	return 0
}

# cache_put BUILT CACHED: gives the cache the file BUILT under the name
# CACHED, unless it is that file already. A rename replaces the cache's
# file at once: another run that is linking it into its own folder gets the
# old or the new.
cache_put() {
	[ "$1" -ef "$2" ] && return
	ln -f "$1" "$2.$$" 2>/dev/null && mv -f "$2.$$" "$2" || rm -f "$2.$$"
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

	# Packages in as few groups as their names allow, each built by one go
	# test -c into a folder of its own (go test -c names a binary after the
	# last element of the import path, so a group holds distinct names;
	# every go command loads the packages anew). A group's tests start as
	# soon as it is built, while the next builds. (Groups of eight, built
	# one after another, made a cold run no shorter: 671 s against 619.)
	local listing
	# Tab-separated: a folder's path may hold spaces.
	listing=$("$go" list -f $'{{.ImportPath}}\t{{.Dir}}\t{{if or .TestGoFiles .XTestGoFiles}}test{{else}}none{{end}}' "$@") || return
	local -a groups=()
	local -A in_group=() dir_of=()
	local pkg dir has name g
	while IFS=$'\t' read -r pkg dir has; do
		if [ "$has" = none ]; then
			printf '?   \t%s\t[no test files]\n' "$pkg"
			continue
		fi
		name=${pkg##*/}
		g=0
		while [ -n "${in_group[$g/$name]:-}" ]; do g=$((g + 1)); done
		in_group[$g/$name]=1
		groups[g]="${groups[g]:-} $pkg"
		dir_of[$pkg]=$dir
	done <<<"$listing"
	[ ${#groups[@]} -gt 0 ] || return 0

	export GOTEST_RUN_FLAGS="${run_flags[*]}" GOTEST_LOCK="$work/output.lock"
	local ok=0
	for g in "${!groups[@]}"; do
		local -a pkgs
		read -r -a pkgs <<<"${groups[g]}"
		mkdir -p "$work/g$g" || return
		# The binaries of earlier runs, each cached under its import path.
		local i
		for i in "${!pkgs[@]}"; do
			ln -f "$cache/${pkgs[i]//\//_}.test" "$work/g$g/${pkgs[i]##*/}.test" 2>/dev/null
		done
		# go test -c prints build errors; stdout here is the list of runs.
		if ! "$go" test -c "${build_flags[@]}" -o "$work/g$g/" "${pkgs[@]}" >&2; then
			echo "FAIL	(build failed)" >&2
			touch "$work/build-failed"
			continue
		fi
		for i in "${!pkgs[@]}"; do
			local built=$work/g$g/${pkgs[i]##*/}.test
			[ -f "$built" ] && cache_put "$built" "$cache/${pkgs[i]//\//_}.test"
			printf '%s\t%s\t%s\n' "${pkgs[i]}" "${dir_of[${pkgs[i]}]}" "$built"
		done
	done | xargs -d '\n' -P "$parallel" -n 1 bash -c '
		IFS=$'\''\t'\'' read -r pkg dir bin <<<"$1"
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
	' _ || ok=1
	[ ! -e "$work/build-failed" ] || ok=1
	return $ok
}

case ${1:-} in
build) shift; build "$@" ;;
test) shift; test_packages "$@" ;;
*) sed -n '2,/^set /p' "$0" | sed '$d'; exit 2 ;;
esac
