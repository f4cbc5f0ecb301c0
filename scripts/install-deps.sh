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
#   util-linux       flock, mount, nsenter (Essential on Debian; listed for
#                    clarity).
#   iproute2         `ip`: e2e/netns builds the network namespaces, veth
#                    pairs and bridge of the multi-node Nomad cluster
#                    (TestCluster); its agents run under nsenter --net.
#   libbearssl-dev   BearSSL, the interposer's TLS client (remote/interposer/
#                    gm_tls.c), linked statically into its libcuda.so.1.
#   containerd runc  e2e/ctrd runs a private containerd (its own config,
#                    sockets and state in a temp dir) with the runc shim, and
#                    gpumux-runtime wraps runc (Debian 12: containerd 1.6.20,
#                    runc 1.1.5). Skipped when the command is already on PATH
#                    from another package (Docker's containerd.io provides
#                    both and conflicts with Debian's). The system service the
#                    containerd package ships is not started by this script
#                    (policy-rc.d while installing): tests never use it.
#   docker.io        e2e/dockerd runs a private Docker engine (dockerd with its
#                    own data root, exec root, socket and daemon.json in a temp
#                    dir, on e2e/ctrd's private containerd) and the docker CLI
#                    (Debian 12: Docker 20.10.24). Its docker.service and
#                    docker.socket are not started either (policy-rc.d).
set -euo pipefail

PACKAGES=(
	gcc
	libc6-dev
	make
	ca-certificates
	util-linux
	iproute2
	libbearssl-dev
	containerd
	runc
	docker.io
)

# Packages that count as present when this command is on PATH.
declare -A COMMAND_OF=(
	[containerd]=containerd
	[runc]=runc
	[docker.io]=dockerd
)

log() { echo "install-deps: $*" >&2; }

if ! command -v dpkg >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
	log "no dpkg/apt-get (not Debian?); not installing anything. Needed: ${PACKAGES[*]}"
	exit 0
fi

missing=()
for p in "${PACKAGES[@]}"; do
	if [[ -n "${COMMAND_OF[$p]:-}" ]] && command -v "${COMMAND_OF[$p]}" >/dev/null 2>&1; then
		continue
	fi
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

# Keep the containerd and docker.io packages from starting their system
# services (a policy of 101 tells invoke-rc.d and deb-systemd-invoke not to
# start anything); an existing policy-rc.d is left alone.
POLICY=/usr/sbin/policy-rc.d
if [[ " ${missing[*]} " =~ " "(containerd|docker.io)" " && ! -e $POLICY ]]; then
	printf '#!/bin/sh\n# installed by gpumux scripts/install-deps.sh while installing\nexit 101\n' |
		"${SUDO[@]}" tee "$POLICY" >/dev/null
	"${SUDO[@]}" chmod 755 "$POLICY"
	trap '"${SUDO[@]}" rm -f "$POLICY"' EXIT
	log "not starting containerd.service or docker.service while installing ($POLICY)"
fi
"${SUDO[@]}" apt-get update
"${SUDO[@]}" apt-get install -y --no-install-recommends "${missing[@]}"
log "installed: ${missing[*]}"
