#!/usr/bin/env bash
# Install the Debian packages gpumux's build and tests need, only those that
# are missing (checked with dpkg-query); `apt-get update` runs once, and only
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
#
# And for the release of the other architecture (make dist DIST_ARCH=arm64 on
# an amd64 machine, DIST_ARCH=amd64 on an arm64 one), which the e2e test
# TestPackageCross builds and checks:
#   gcc-aarch64-linux-gnu libc6-dev-arm64-cross
#                    Debian's cross C toolchain (with binutils-aarch64-linux-gnu:
#                    aarch64-linux-gnu-strip) and the target's C library: cgo
#                    for the Go binaries, the interposer, the limiter, the
#                    remote NVML and its nvidia-smi.
#   libbearssl-dev:arm64
#                    BearSSL for the target, from Debian's arm64 archive
#                    (multiarch: the script adds the architecture with
#                    `dpkg --add-architecture` when dpkg lacks it).
#   qemu-user-static qemu-aarch64-static: the test runs each cross-built
#                    binary's --version (user-mode emulation, with libc6:arm64,
#                    which libbearssl-dev:arm64 brings; no binfmt
#                    registration needed).
#                    On arm64 the same packages for amd64: gcc-x86-64-linux-gnu,
#                    libc6-dev-amd64-cross, libbearssl-dev:amd64.
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
	log "no dpkg/apt-get (not Debian?); not installing anything. Needed: ${PACKAGES[*]} and a cross C toolchain"
	exit 0
fi

# The other architecture's toolchain and BearSSL (Debian's names).
NATIVE_ARCH=$(dpkg --print-architecture)
CROSS_ARCH=
case "$NATIVE_ARCH" in
amd64) CROSS_ARCH=arm64 CROSS_TRIPLET=aarch64-linux-gnu ;;
arm64) CROSS_ARCH=amd64 CROSS_TRIPLET=x86-64-linux-gnu ;;
*) log "no cross toolchain for $NATIVE_ARCH: make dist builds for this architecture only" ;;
esac
if [[ -n $CROSS_ARCH ]]; then
	PACKAGES+=("gcc-$CROSS_TRIPLET" "libc6-dev-$CROSS_ARCH-cross" "libbearssl-dev:$CROSS_ARCH" qemu-user-static)
fi

# Whether package $1 (NAME, or NAME:ARCH for another architecture's) is
# installed: for this machine's architecture (or "all") when $1 names none.
# A Multi-Arch: same package may be installed for both (libbearssl-dev).
installed() {
	local arch=$NATIVE_ARCH
	[[ $1 == *:* ]] && arch=${1#*:}
	dpkg-query -W -f='${Architecture} ${db:Status-Status}\n' "${1%%:*}" 2>/dev/null |
		grep -Eq "^($arch|all) installed\$"
}

missing=()
for p in "${PACKAGES[@]}"; do
	if [[ -n "${COMMAND_OF[$p]:-}" ]] && command -v "${COMMAND_OF[$p]}" >/dev/null 2>&1; then
		continue
	fi
	if ! installed "$p"; then
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

# A package of the other architecture needs dpkg to know it (multiarch);
# apt-get update then fetches its package lists too.
if [[ -n $CROSS_ARCH && " ${missing[*]} " == *":$CROSS_ARCH "* ]] &&
	! dpkg --print-foreign-architectures | grep -qx "$CROSS_ARCH"; then
	log "adding the architecture $CROSS_ARCH (dpkg --add-architecture)"
	"${SUDO[@]}" dpkg --add-architecture "$CROSS_ARCH"
fi

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
