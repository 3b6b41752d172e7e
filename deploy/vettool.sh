#!/usr/bin/env bash
# vettool.sh is the -vettool of make vet: cmd/vet itself, with every one of
# its checks, except that it computes no facts for packages outside this
# repository.
#
# go vet runs the vet tool once for every package it is asked to vet and,
# before that, once for every package those import, the standard library's
# and other modules' included, only to compute facts (what a package tells
# its importers about its functions, such as which are printf wrappers).
# Each of those runs parses and type-checks its package from source: for
# this repository some 1,100 packages, about 170 of the 200 CPU-seconds vet
# took in a cold make test. The facts of other modules add little: cmd/vet
# knows the standard library's printf functions by name, and a dependency's
# own findings are never reported. So for a package outside the repository
# this script writes an empty fact file (no facts) and exits; for one of
# ours it runs cmd/vet as go vet would. make lint runs plain go vet.
#
#   GOVET_TOOL  cmd/vet's binary ($(go env GOTOOLDIR)/vet by default)
#   GOVET_ROOT  the repository's folder, without symbolic links (this
#               script's parent's by default)
#
# go vet runs the tool in the folder of the package it vets, with the path
# of the package's vet.cfg as the last argument, and wants the facts in
# vet.out beside it. It caches the results under the tool's -V=full line,
# which names this tool (and the version of this script) apart from
# cmd/vet, so plain go vet never reuses the empty facts.
set -uo pipefail

# cmd/vet's path, found only when it is run: most runs are for packages
# outside the repository, and go env costs a process each.
cmdvet() { echo "${GOVET_TOOL:-$("${GO:-go}" env GOTOOLDIR)/vet}"; }
case ${1:-} in
-V=full)
	# With this script's own hash: a change to it is a new tool to the
	# cache.
	version=$("$(cmdvet)" -V=full) || exit
	script=$(sha256sum "$0") || exit
	echo "$version (deploy/vettool.sh ${script:0:16}: no facts outside the repository)"
	exit
	;;
esac
root=${GOVET_ROOT:-$(cd "$(dirname "$0")/.." && pwd -P)}
# Both paths without symbolic links (make's CURDIR has none), so that a
# checkout reached through a link is still the repository.
cd -P . || exit
cfg=${!#}
if [[ $cfg == */vet.cfg && $PWD != "$root"/* ]]; then
	: >"${cfg%/*}/vet.out"
	exit
fi
exec "$(cmdvet)" "$@"
