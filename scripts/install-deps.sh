#!/usr/bin/env bash
# Install the Debian packages gpumux's build and tests need, only those that
# are missing (checked with dpkg -s); `apt-get update` runs once, and only
# if something must be installed. Safe to run repeatedly.
#
# Packages:
#   gcc libc6-dev    cgo: Nomad's exec driver (runc libcontainer/nsenter) and
#                    go-nvml need a C compiler; also `go test -race`.
#   make             the Makefile.
#   ca-certificates  HTTPS to the Go module proxy.
#   util-linux       flock, mount (Essential on Debian; listed for clarity).
# Later: containerd, runc.
set -euo pipefail

PACKAGES=(
	gcc
	libc6-dev
	make
	ca-certificates
	util-linux
)

log() { echo "install-deps: $*" >&2; }

if ! command -v dpkg >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
	log "no dpkg/apt-get (not Debian?); not installing anything. Needed: ${PACKAGES[*]}"
	exit 0
fi

missing=()
for p in "${PACKAGES[@]}"; do
	if [[ "$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null)" != installed ]]; then
		missing+=("$p")
	fi
done

if ((${#missing[@]} == 0)); then
	log "all present: ${PACKAGES[*]}"
	exit 0
fi

SUDO=()
if ((EUID != 0)); then
	if command -v sudo >/dev/null 2>&1; then
		SUDO=(sudo)
	else
		log "ERROR: missing packages ${missing[*]} and not root (no sudo)"
		exit 1
	fi
fi

log "installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update
"${SUDO[@]}" apt-get install -y --no-install-recommends "${missing[@]}"
log "installed: ${missing[*]}"
