#!/usr/bin/env bash
# Packs what the containerd benchmarks (BenchmarkContainerLifecycle on
# Debian's containerd 1.6, BenchmarkCRILifecycle on containerd 2.x) need to
# run on a machine without Go or containerd, such as the GPU machine, into
# one archive small enough to carry there (.devbin/engines.tar.xz, about
# 80 MB less than its contents):
#
#   .devbin/e2e.test, .devbin/probe        the e2e tests and their probe
#   .devbin/c16/{containerd,containerd-shim-runc-v2,runc,libseccomp.so.2}
#                                          Debian's containerd 1.6 and runc
#   .devbin/c2/{containerd,containerd-shim-runc-v2,runc}
#                                          containerd 2.x (make containerd2)
#   bin/{gpumux,gpumux-runtime,gpumux-runtime-core,gpumux-runtime-hook,
#        gpumux-fake-mps-control,limiter}  this build's, as make build lays
#                                          them out (stripped)
#
# and Docker into a second one, .devbin/docker.tar.xz (about 60 MB): the device tool
# carries 64 MiB a call, so it goes in a call of its own just before (the
# machine keeps what the first unpacked while it stays warm):
#
#   .devbin/d26/{dockerd,docker,docker-proxy}
#                                          Docker 26 (make docker-cdi), for
#                                          BenchmarkDockerCDIRun, and
#                                          docker-proxy from PATH, which
#                                          dockerd wants on PATH even with
#                                          no port to publish
#   .devbin/d20/{dockerd,docker,lib*.so*}  Debian's Docker 20.10 (docker.io)
#                                          for BenchmarkDockerRun, with the
#                                          libraries its dockerd links
#                                          other than glibc's (a machine
#                                          without Debian's docker.io lacks
#                                          libdevmapper)
#
# Unpacked in a copy of the repository (the device tool's working tree),
# from the repository root (docs/benchmarks.md has the commands):
#
#   tar -xJf .devbin/engines.tar.xz && cd e2e &&
#     PATH=$PWD/../.devbin/c16:$PATH LD_LIBRARY_PATH=$PWD/../.devbin/c16 GPUMUX_PROBE_BIN=$PWD/../.devbin/probe \
#     ../.devbin/e2e.test -test.run '^$' -test.bench ContainerLifecycle -test.benchtime 30x -test.count 5
#
# and, with .devbin/docker.tar.xz unpacked there too:
#
#   PATH=$PWD/../.devbin/c16:$PWD/../.devbin/d26:$PATH LD_LIBRARY_PATH=$PWD/../.devbin/c16 \
#     GPUMUX_PROBE_BIN=$PWD/../.devbin/probe DOCKER_CDI_DIR=$PWD/../.devbin/d26 \
#     ../.devbin/e2e.test -test.run '^$' -test.bench DockerCDIRun -test.benchtime 20x -test.count 4
#
# and Docker 20.10, whose libraries go in the loader's cache (dockerd
# starts its layer unpacker with an environment of its own, without
# LD_LIBRARY_PATH; of them, the GPU machine lacks only libdevmapper):
#
#   echo "$PWD/../.devbin/d20" >/etc/ld.so.conf.d/zz-gpumux-bench-d20.conf && ldconfig
#   PATH=$PWD/../.devbin/c16:$PWD/../.devbin/d26:$PATH LD_LIBRARY_PATH=$PWD/../.devbin/c16 \
#     GPUMUX_PROBE_BIN=$PWD/../.devbin/probe DOCKERD_BIN=$PWD/../.devbin/d20/dockerd DOCKER_BIN=$PWD/../.devbin/d20/docker \
#     ../.devbin/e2e.test -test.run '^$' -test.bench 'DockerRun$' -test.benchtime 20x -test.count 4
#
# Run by make engine-bin, after make build (GO_BUILD_LDFLAGS: the
# version make stamps), as root; Debian's containerd is found on PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
c2=$(scripts/build-containerd.sh | tail -n 1) # builds it where it is not there yet
ldflags="-s -w ${GO_BUILD_LDFLAGS:-}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/.devbin/c16" "$work/.devbin/c2" "$work/bin"

go test -c -tags 'e2e no_dynamic_plugins' -ldflags="$ldflags" -o "$work/.devbin/e2e.test" ./e2e/
CGO_ENABLED=0 go build -trimpath -o "$work/.devbin/probe" ./e2e/probe
for c in gpumux gpumux-runtime-core gpumux-runtime-hook gpumux-fake-mps-control; do
	go build -ldflags="$ldflags" -o "$work/bin/$c" "./cmd/$c"
done
cp bin/gpumux-runtime "$work/bin/"
cp -r bin/limiter "$work/bin/"

for b in containerd containerd-shim-runc-v2 runc; do
	src=$(command -v "$b") || { echo "pack-engines: no $b on PATH (Debian packages containerd and runc: scripts/install-deps.sh)" >&2; exit 1; }
	cp "$src" "$work/.devbin/c16/"
	cp "$c2/$b" "$work/.devbin/c2/" || { echo "pack-engines: no $c2/$b (make containerd2)" >&2; exit 1; }
done
# Debian's runc links libseccomp: the copy serves runc where the machine
# lacks it (LD_LIBRARY_PATH), not `runc init`, which runc starts with an
# environment of its own: a machine without libseccomp needs it installed
# (the GPU machine has it).
seccomp=$(ldd "$work/.devbin/c16/runc" | awk '/libseccomp/ {print $3}')
[[ -n $seccomp ]] && cp "$seccomp" "$work/.devbin/c16/"
strip "$work"/.devbin/c16/{containerd,containerd-shim-runc-v2,runc} "$work"/.devbin/c2/*

mkdir -p .devbin
tar -C "$work" -cJf .devbin/engines.tar.xz .devbin bin

docker=$(scripts/fetch-docker.sh | tail -n 1)
mkdir -p "$work/docker/.devbin/d26"
cp "$docker/dockerd" "$docker/docker" "$work/docker/.devbin/d26/"
proxy=$(command -v docker-proxy) || { echo "pack-engines: no docker-proxy on PATH (Debian package docker.io)" >&2; exit 1; }
cp "$proxy" "$work/docker/.devbin/d26/"
strip "$work"/docker/.devbin/d26/*
mkdir -p "$work/docker/.devbin/d20"
for b in dockerd docker; do
	src=$(command -v "$b") || { echo "pack-engines: no $b on PATH (Debian package docker.io)" >&2; exit 1; }
	# Debian's, not another one on PATH before /usr/bin and /usr/sbin.
	[[ $b == docker && -x /usr/bin/docker ]] && src=/usr/bin/docker
	[[ $b == dockerd && -x /usr/sbin/dockerd ]] && src=/usr/sbin/dockerd
	cp "$src" "$work/docker/.devbin/d20/"
done
ldd "$work/docker/.devbin/d20/dockerd" | awk '$3 ~ /^\// && $1 !~ /^(libc|libm|libpthread|libdl|librt)\.so/ {print $3}' |
	xargs -r cp -L -t "$work/docker/.devbin/d20/"
tar -C "$work/docker" -cJf .devbin/docker.tar.xz .devbin
ls -la .devbin/engines.tar.xz .devbin/docker.tar.xz
