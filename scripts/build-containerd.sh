#!/usr/bin/env bash
# Build containerd 2.x (v2.2.9) and a runc it works with (v1.3.2) from the
# Go module proxy into a cache dir, for the e2e tests of the CDI-native and
# NRI paths (Debian 12's containerd is 1.6, which has neither CRI's CDI
# support nor NRI; its runc 1.1.5 cannot start containerd 2.2's CRI
# containers: "can't get final child's PID from pipe: EOF"):
#
#   ${GPUMUX_CACHE:-$HOME/.cache/gpumux}/containerd-v2.2.9/bin/{containerd,containerd-shim-runc-v2,ctr,runc}
#
# The tests put that directory first on the daemon's PATH, so its shim and
# its runc (and gpumux-runtime's runc) are these.
#
# containerd's v2 module has no replace directives, so `go install
# module/cmd/...@version` builds it as released. The btrfs snapshotter needs
# libbtrfs headers (tag no_btrfs leaves it out); the tests use the native
# snapshotter.
#
# Does nothing if the binaries exist and containerd reports the right
# version. Prints the bin directory on stdout as its last line.
set -euo pipefail

CONTAINERD_VERSION=2.2.9
MODULE=github.com/containerd/containerd/v2
# runc v1.3.2: the last release whose module has no replace directive
# (1.3.3's points into its repository), so go install builds it. Without
# the seccomp build tag: no libseccomp needed, and CRI's default profile is
# unconfined.
RUNC_VERSION=1.3.2

NAME=containerd
# shellcheck source=scripts/cached-build.sh
. "$(dirname "$0")/cached-build.sh"
DIR="$CACHE/containerd-v$CONTAINERD_VERSION"
BIN="$DIR/bin"
OUT=$BIN
CMDS=(containerd containerd-shim-runc-v2 ctr)

built() {
	local c
	for c in "${CMDS[@]}" runc; do [[ -x "$BIN/$c" ]] || return 1; done
	[[ "$("$BIN/runc" --version 2>&1)" == "runc version $RUNC_VERSION"* ]] || return 1
	local v
	v="$("$BIN/containerd" --version 2>&1)" || return 1
	[[ "$v" == *" v$CONTAINERD_VERSION "* ]]
}

done_if_built "up to date"
start_build
log "building $MODULE v$CONTAINERD_VERSION: ${CMDS[*]}, and runc v$RUNC_VERSION (takes ~4-7 min on 2 cores)"
start=$SECONDS
tmp="$DIR/bin.tmp.$$"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp"
pkgs=()
for c in "${CMDS[@]}"; do pkgs+=("$MODULE/cmd/$c@v$CONTAINERD_VERSION"); done
(
	export GOBIN="$tmp" GOWORK=off GOFLAGS= CGO_ENABLED=0
	go install -trimpath -tags 'no_btrfs no_devmapper no_zfs' \
		-ldflags "-X $MODULE/version.Version=v$CONTAINERD_VERSION -X $MODULE/version.Revision=v$CONTAINERD_VERSION" \
		"${pkgs[@]}"
) || die "go install of containerd v$CONTAINERD_VERSION failed (see output above)"
(
	# runc's nsenter is C: cgo is required.
	export GOBIN="$tmp" GOWORK=off GOFLAGS= CGO_ENABLED=1
	go install -trimpath -ldflags "-X main.version=$RUNC_VERSION" "github.com/opencontainers/runc@v$RUNC_VERSION"
) || die "go install of runc v$RUNC_VERSION failed (see output above)"

v="$("$tmp/containerd" --version 2>&1)" || die "built containerd does not run: $v"
[[ "$v" == *" v$CONTAINERD_VERSION "* ]] || die "built containerd reports '$v', want v$CONTAINERD_VERSION"
rm -rf "$BIN"
mv "$tmp" "$BIN"
log "built $BIN ($v) in $((SECONDS - start))s"
echo "$BIN"
