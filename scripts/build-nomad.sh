#!/usr/bin/env bash
# Build a Nomad agent binary (v1.10.5) from the Go module proxy into a cache dir.
#
#   ${GPUMUX_CACHE:-$HOME/.cache/gpumux}/nomad-v1.10.5/nomad
#
# Nomad's own go.mod cannot be built with `go install nomad@v1.10.5`: it
# replaces its api module with ./api (absent from the module zip) and
# replaces hcl and go-winio with forks. So we build it from a throwaway
# module that requires nomad plus the api pseudo-version of the same commit
# and repeats the two fork replaces.
#
# Does nothing if the binary exists and reports the right version.
# Prints the binary path on stdout as its last line.
set -euo pipefail

NOMAD_VERSION=1.10.5
# github.com/hashicorp/nomad/api at the v1.10.5 commit (a3b86c697f38).
NOMAD_API_VERSION=v0.0.0-20250909143645-a3b86c697f38
NOMAD_GIT_COMMIT=a3b86c697f38
NOMAD_BUILD_DATE=2025-09-09T14:36:45Z

NAME=nomad
# shellcheck source=scripts/cached-build.sh
. "$(dirname "$0")/cached-build.sh"
DIR="$CACHE/nomad-v$NOMAD_VERSION"
BIN="$DIR/nomad"
OUT=$BIN

# version_line BIN: first line of `BIN version` (no pipe: with pipefail, head
# closing the pipe early could fail the pipeline).
version_line() {
	local out
	out="$("$1" version 2>&1)" || return 1
	echo "${out%%$'\n'*}"
}

built() {
	[[ -x "$BIN" ]] || return 1
	local v
	v="$(version_line "$BIN")" || return 1
	[[ "$v" == "Nomad v$NOMAD_VERSION" ]]
}

done_if_built "up to date"
# cgo is required: the exec driver's executor imports runc's libcontainer/nsenter
# (C code run before main); without cgo the build fails or exec cannot work.
command -v "${CC:-gcc}" >/dev/null 2>&1 ||
	die "C compiler '${CC:-gcc}' not found (cgo is required); run scripts/install-deps.sh (gcc libc6-dev)"
start_build

SRC="$DIR/src"
rm -rf "$SRC"
mkdir -p "$SRC"
cat >"$SRC/go.mod" <<GOMOD
module gpumux.local/nomadbuild

go 1.24.7

require (
	github.com/hashicorp/nomad v$NOMAD_VERSION
	github.com/hashicorp/nomad/api $NOMAD_API_VERSION
)

replace (
	github.com/Microsoft/go-winio => github.com/endocrimes/go-winio v0.4.13-0.20190628114223-fb47a8b41948
	github.com/hashicorp/hcl => github.com/hashicorp/hcl v1.0.1-nomad-1
)
GOMOD

log "building github.com/hashicorp/nomad v$NOMAD_VERSION in $SRC (takes ~5-10 min on 2 cores)"
start=$SECONDS
tmpbin="$DIR/nomad.tmp.$$"
trap 'rm -f "$tmpbin"' EXIT
(
	cd "$SRC"
	# -mod=mod lets go resolve and record the full dependency graph (go.sum)
	# from the proxy; checksums are still verified against sum.golang.org.
	export GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=mod"
	export GOWORK=off
	export CGO_ENABLED=1
	go build -trimpath \
		-ldflags "-X github.com/hashicorp/nomad/version.GitCommit=$NOMAD_GIT_COMMIT -X github.com/hashicorp/nomad/version.BuildDate=$NOMAD_BUILD_DATE" \
		-o "$tmpbin" github.com/hashicorp/nomad
) || die "go build of nomad v$NOMAD_VERSION failed (see output above)"

v="$(version_line "$tmpbin")" || die "built binary $tmpbin does not run: $("$tmpbin" version 2>&1)"
[[ "$v" == "Nomad v$NOMAD_VERSION" ]] || die "built binary reports '$v', want 'Nomad v$NOMAD_VERSION'"
mv -f "$tmpbin" "$BIN"
log "built $BIN ($v) in $((SECONDS - start))s"
echo "$BIN"
