#!/bin/sh
# prereqs.sh installs what is missing of a README section's packages: the
# one "apt-get install" line under the heading "## SECTION" of README.md.
#
#   prereqs.sh SECTION      e.g. prereqs.sh 'Test prerequisites'
#
# A package is present when dpkg has it installed or, failing that, when
# what it provides is found (a toolchain installed some other way). When
# all are present it does nothing more and prints nothing. On Debian and
# Ubuntu (dpkg-query and apt-get on PATH) it then runs apt-get update and
# apt-get install of exactly the missing ones, in the line's order,
# through sudo when not root; without root or sudo it fails naming them
# and the command to run. Elsewhere it fails naming them, as Homebrew
# packages on macOS. It is POSIX sh, so that it needs nothing it may be
# about to install. Lists of packages are split on spaces unquoted, with
# globbing off (-f).
# shellcheck disable=SC2086
set -euf

section=${1:?usage: prereqs.sh SECTION (a heading of README.md, e.g. 'Test prerequisites')}
# The README beside this folder (no dirname: PATH may hold little).
case $0 in */*) readme=${0%/*}/../README.md ;; *) readme=../README.md ;; esac

# The section's line, read as the README shows it.
packages=
in_section=
while IFS= read -r line; do
	case $line in
	"## $section") in_section=1 ;;
	"## "*) in_section= ;;
	"apt-get install "*) [ -z "$in_section" ] || packages=${line#apt-get install } ;;
	esac
done <"$readme"
words=$packages
packages=
for p in $words; do
	case $p in -*) ;; *) packages="$packages $p" ;; esac
done
packages=${packages# }
if [ -z "$packages" ]; then
	echo "prereqs.sh: README.md has no \"apt-get install\" line under \"## $section\"" >&2
	exit 2
fi

# provided PACKAGE succeeds when what the Debian package gives is here
# without it (a toolchain from elsewhere, or any system but Debian's).
provided() {
	case $1 in
	python3-venv) python3 -c 'import ensurepip, venv' ;;
	php-cli) command -v php ;;
	php-curl) php -r 'exit(extension_loaded("curl") ? 0 : 1);' ;;
	*) command -v "$1" ;;
	esac >/dev/null 2>&1
}

debian=
if command -v dpkg-query >/dev/null && command -v apt-get >/dev/null; then
	debian=1
	# One dpkg-query for all, each line "STATUS NAME" (e.g. "installed
	# wrk"); a package dpkg does not know is not listed.
	installed=$(dpkg-query -W -f='${db:Status-Status} ${Package}\n' $packages 2>/dev/null) || true
fi
missing=
for p in $packages; do
	if [ -n "$debian" ]; then
		case "
$installed
" in
		*"
installed $p
"*) continue ;;
		esac
	fi
	provided "$p" || missing="$missing $p"
done
missing=${missing# }
[ -n "$missing" ] || exit 0

if [ -n "$debian" ]; then
	if [ "$(id -u)" -eq 0 ]; then
		sudo=
	elif command -v sudo >/dev/null; then
		sudo=sudo
	else
		echo "$section (README.md): these Debian packages are missing: $missing" >&2
		echo "installing them needs root, and sudo is not installed; as root, run:" >&2
		echo "  apt-get update && apt-get install -y $missing" >&2
		exit 1
	fi
	echo "$section (README.md): installing the Debian packages it lists that are missing here${sudo:+ (with sudo)}: $missing"
	# No questions asked; sudo passes the variable on only when given it.
	export DEBIAN_FRONTEND=noninteractive
	$sudo apt-get update -q
	$sudo ${sudo:+DEBIAN_FRONTEND=noninteractive} apt-get install -y -q $missing
	exit 0
fi

formulae=
casks=
for p in $missing; do
	case $p in
	python3-venv) f=python ;;
	php-*) f=php ;;
	chromium) casks="$casks chromium" && continue ;;
	*) f=$p ;;
	esac
	case "$formulae " in *" $f "*) ;; *) formulae="$formulae $f" ;; esac
done
echo "$section (README.md): missing here (Debian's package names): $missing" >&2
if [ "$(uname -s)" = Darwin ]; then
	echo "install them with Homebrew:" >&2
	[ -z "$formulae" ] || echo "  brew install$formulae" >&2
	[ -z "$casks" ] || echo "  brew install --cask$casks" >&2
else
	echo "install what provides them with this system's package manager" >&2
fi
exit 1
