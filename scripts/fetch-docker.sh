#!/usr/bin/env bash
# Fetch Docker 26 (Debian 13's docker.io and docker-cli, the first Debian
# release whose Docker applies CDI specs natively) into a cache dir, for
# the e2e tests of Docker's CDI path (Debian 12's docker.io is 20.10, which
# has no CDI):
#
#   ${GPUMUX_CACHE:-$HOME/.cache/gpumux}/docker-v26.1.5/bin/{dockerd,docker}
#
# The packages come from the Debian archive ($DEBIAN_MIRROR, default
# http://deb.debian.org/debian), pinned by version and checked against the
# SHA-256 sums of trixie's package index; only the two programs are
# extracted (dpkg-deb), nothing is installed. Debian 13's dockerd runs on
# Debian 12 (it needs glibc 2.34, libsystemd0 and libcap2). amd64 only: the
# sums are the amd64 packages'.
#
# Does nothing if the programs exist and report the right version. Prints
# the bin directory on stdout as its last line.
set -euo pipefail

DOCKER_VERSION=26.1.5
DEB_VERSION=26.1.5+dfsg1-9+deb13u1+b1
declare -A SHA256=(
	[docker.io]=53ae1a99f15113f0a0d2226808ec0d24ee31b3b87b87ab8ec35be09a1a2ee13b
	[docker-cli]=596647bc4ffaaaf2e2321116b8a10f6a6086ada797c17a7117798cb391a72776
)
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"

NAME=docker
# shellcheck source=scripts/cached-build.sh
. "$(dirname "$0")/cached-build.sh"
DIR="$CACHE/docker-v$DOCKER_VERSION"
BIN="$DIR/bin"
OUT=$BIN

built() {
	[[ -x "$BIN/dockerd" && -x "$BIN/docker" ]] || return 1
	[[ "$("$BIN/dockerd" --version 2>&1)" == "Docker version $DOCKER_VERSION"* ]] || return 1
	[[ "$("$BIN/docker" --version 2>&1)" == "Docker version $DOCKER_VERSION"* ]]
}

done_if_built "up to date"
[[ "$(dpkg --print-architecture 2>/dev/null)" == amd64 ]] || die "the pinned packages are amd64's; this machine is $(dpkg --print-architecture 2>/dev/null || uname -m)"
for c in curl dpkg-deb sha256sum; do command -v "$c" >/dev/null 2>&1 || die "$c not found"; done
lock_cache

tmp="$DIR/fetch.tmp.$$"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/root"
for pkg in docker.io docker-cli; do
	deb="${pkg}_${DEB_VERSION}_amd64.deb"
	url="$MIRROR/pool/main/d/docker.io/$deb"
	log "fetching $url"
	curl -fsS --retry 3 -o "$tmp/$deb" "$url" || die "fetching $url failed"
	sum="$(sha256sum "$tmp/$deb" | cut -d' ' -f1)"
	[[ "$sum" == "${SHA256[$pkg]}" ]] || die "$deb: SHA-256 $sum, want ${SHA256[$pkg]} (trixie's index)"
	dpkg-deb -x "$tmp/$deb" "$tmp/root"
done
mkdir -p "$tmp/bin"
cp "$tmp/root/usr/sbin/dockerd" "$tmp/root/usr/bin/docker" "$tmp/bin/"
v="$("$tmp/bin/dockerd" --version 2>&1)" || die "the fetched dockerd does not run here: $v"
[[ "$v" == "Docker version $DOCKER_VERSION"* ]] || die "the fetched dockerd reports '$v', want $DOCKER_VERSION"
rm -rf "$BIN"
mv "$tmp/bin" "$BIN"
log "fetched $BIN ($v)"
echo "$BIN"
