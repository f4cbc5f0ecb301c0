# Sourced by scripts/build-nomad.sh, build-containerd.sh and
# fetch-docker.sh: what their builds (or fetch) of a tool into
# $GPUMUX_CACHE share. The sourcing script sets
# NAME (for its messages), DIR (the tool's cache directory) and OUT (what
# it prints when done), and defines built, which says whether a good build
# is in place.

CACHE="${GPUMUX_CACHE:-${HOME:-/root}/.cache/gpumux}"

log() { echo "build-$NAME: $*" >&2; }
die() { echo "build-$NAME: ERROR: $*" >&2; exit 1; }

# done_if_built WHY: when built says so, logs WHY, prints OUT and exits.
done_if_built() {
	if built; then
		log "$1: $OUT"
		echo "$OUT"
		exit 0
	fi
}

# lock_cache: DIR's lock, held until the script exits, so that concurrent
# runs build (or fetch) once; a run that waited for the lock stops there if
# the other built it.
lock_cache() {
	command -v flock >/dev/null 2>&1 || die "flock (util-linux) not found"
	mkdir -p "$DIR"
	exec 9>"$DIR/.lock"
	log "waiting for lock $DIR/.lock"
	flock 9
	done_if_built "built concurrently"
}

# start_build: a Go toolchain on PATH (/usr/local/go/bin when go is not on
# it) and DIR's lock (lock_cache).
start_build() {
	if ! command -v go >/dev/null 2>&1; then
		[[ -x /usr/local/go/bin/go ]] || die "go toolchain not found in PATH or /usr/local/go/bin"
		export PATH="/usr/local/go/bin:$PATH"
	fi
	lock_cache
	log "using $(go version) (GOPROXY=$(go env GOPROXY))"
}
