#!/usr/bin/env bash
# Live migration of a remote GPU session on a real GPU (issue 15; docs/remote.md).
#
# Needs, carried from a build machine (`make gpu-bin`): .devbin/gpumux-remoted,
# .devbin/gpumux and bin/remote/libcuda.so.1; and here python3 with PyTorch (CUDA).
# Builds nothing.
#
#   e2e/gpu/remote/migrate.sh train   # migrate_train.py train: once without moves, once with
#                                     # MOVES moves A->B->A... triggered from its STEP lines;
#                                     # the STEP/PARAMS lines must be identical
#   e2e/gpu/remote/migrate.sh pipeline # the same with migrate_train.py pipeline: torch.compile,
#                                     # bf16 autocast, DataLoader workers with pinned batches
#   e2e/gpu/remote/migrate.sh hold    # migrate_train.py hold GIB for each of SIZES: one move
#                                     # mid-run; the pause the program saw (GAP_MS), the
#                                     # command's time and the servers' pause, in a table
#   e2e/gpu/remote/migrate.sh all     # both (the default)
#
# GPUS="0 1" puts server a on the first GPU and b on the second (CUDA_VISIBLE_DEVICES), so
# the moves go between GPUs; unset, both servers serve every GPU and the token grants GPU 0.
# MOVES (4), STEPS (300), SIZES ("1 4 16 40", GiB), HOLD_STEPS (40), PYTHON (python3);
# REMOTED_FLAGS adds flags to both servers'. REMOTE_TIMEOUT (900, seconds) is the programs'
# GPUMUX_REMOTE_TIMEOUT: the interposer waits that long for any reply, and the held call's
# reply comes only once the whole session has been copied to the target (at the default
# 30 s a 16 or 40 GiB move would be taken for a lost server). PYTORCH_CUDA_ALLOC_CONF is
# the programs' ALLOC_CONF (unset by default: PyTorch's plain caching allocator);
# ALLOC_CONF=expandable_segments:True moves the program's own virtual memory
# (cuMemCreate), backend:cudaMallocAsync moves its memory pools (the server's own on a
# --migratable server). Logs and outputs go to $OUT (default: a
# temporary directory, printed). Two gpumux-remoted (backend cuda, --migratable; each
# tenant in a worker process of its own, TENANT_PROCESSES=false: one process each) serve the one GPU on 127.0.0.1 and private unix
# sockets, with a fresh pool secret; both are stopped on exit. It changes no GPU setting.
set -euo pipefail
cd "$(dirname "$0")/../../.."
root=$PWD
work=$(mktemp -d)
out=${OUT:-$work}
mkdir -p "$out"
mode=${1:-all}
moves=${MOVES:-4}
steps=${STEPS:-300}
sizes=${SIZES:-1 4 16 40}
hold_steps=${HOLD_STEPS:-40}
py=${PYTHON:-python3}
tenant_procs=${TENANT_PROCESSES:-true}
prog=e2e/gpu/remote/migrate_train.py

for f in .devbin/gpumux-remoted .devbin/gpumux bin/remote/libcuda.so.1; do
	[[ -e $f ]] || { echo "missing $f: run make gpu-bin on a build machine and carry it here" >&2; exit 2; }
done

.devbin/gpumux remote secret >"$work/pool.key"
chmod 600 "$work/pool.key"
declare -A addr pid gpu
if [[ -n ${GPUS:-} ]]; then
	read -r gpu[a] gpu[b] <<<"$GPUS"
	[[ -n ${gpu[b]:-} ]] || { echo "GPUS: want two GPU indexes, got \"$GPUS\"" >&2; exit 2; }
fi
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true' EXIT

# start NAME: a migrating server on a free loopback port and $work/NAME.sock.
start() {
	local name=$1 port
	port=$((20000 + RANDOM % 20000))
	local vis=()
	[[ -z ${gpu[$name]:-} ]] || vis=(env CUDA_VISIBLE_DEVICES="${gpu[$name]}")
	"${vis[@]}" .devbin/gpumux-remoted --backend cuda --listen "127.0.0.1:$port" --unix "$work/$name.sock" \
		--token-file "$work/pool.key" --tenant-processes="$tenant_procs" --migratable ${REMOTED_FLAGS:-} \
		>>"$out/remoted.$name.log" 2>&1 &
	pid[$name]=$!
	pids+=("$!")
	addr[$name]=127.0.0.1:$port
	for _ in $(seq 100); do [[ -S $work/$name.sock ]] && return; sleep 0.1; done
	echo "gpumux-remoted $name did not start:" >&2
	cat "$out/remoted.$name.log" >&2
	exit 1
}

# remote ID ADDR CMD...: run CMD through the interposer with a token of ID.
remote() {
	local id=$1 at=$2 tok
	shift 2
	tok=$(.devbin/gpumux remote token --secret-file "$work/pool.key" --id "$id" --ttl 2h)
	env -u PYTORCH_CUDA_ALLOC_CONF ${ALLOC_CONF:+PYTORCH_CUDA_ALLOC_CONF=$ALLOC_CONF} LD_LIBRARY_PATH="$root/bin/remote" GPUMUX_REMOTE_ADDR="$at" \
		GPUMUX_REMOTE_TOKEN="$tok" GPUMUX_REMOTE_TIMEOUT="${REMOTE_TIMEOUT:-900}" "$@"
}

# move ID FROM TO: migrate every session of ID; prints the command's wall time in ms.
move() {
	local id=$1 from=$2 to=$3 t0 t1 rc=0
	t0=$(date +%s%N)
	.devbin/gpumux remote migrate --from "${addr[$from]}" --to "${addr[$to]}" --tenant "$id" \
		--secret-file "$work/pool.key" --timeout 10m >>"$out/moves.log" 2>&1 || rc=$?
	t1=$(date +%s%N)
	echo "$id $from->$to exit $rc $(((t1 - t0) / 1000000)) ms" >>"$out/moves.log"
	echo $(((t1 - t0) / 1000000))
	return $rc
}

# wait_line FILE PATTERN PID: wait until FILE has a line matching PATTERN (or PID ends).
wait_line() {
	while ! grep -qE "$2" "$1" 2>/dev/null; do
		kill -0 "$3" 2>/dev/null || return 1
		sleep 0.05
	done
}

start a
start b

# train [MODE]: migrate_train.py MODE (train) once without moves, once with.
train() {
	local m=${1:-train}
	echo "== $m: $steps steps, unmigrated"
	remote "$m-plain" "${addr[a]}" "$py" "$prog" "$m" "$steps" >"$out/$m.plain.txt" 2>"$out/$m.plain.err"
	echo "== $m: $steps steps, $moves moves"
	remote "$m" "${addr[a]}" "$py" "$prog" "$m" "$steps" >"$out/$m.moved.txt" 2>"$out/$m.moved.err" &
	local p=$! at=a to=b failed=0
	for k in $(seq "$moves"); do
		local s=$((k * steps / (moves + 1)))
		wait_line "$out/$m.moved.txt" "^STEP $s " "$p" || break
		if ms=$(move "$m" "$at" "$to"); then
			echo "move $k at step $s: $at -> $to, $ms ms"
			local t=$at; at=$to; to=$t
		else
			echo "move $k at step $s: $at -> $to FAILED (moves.log)"; failed=1
		fi
	done
	wait "$p" || { echo "the migrated run exited $? ($m.moved.err)"; failed=1; }
	if diff <(grep -E '^(STEP|PARAMS)' "$out/$m.plain.txt") <(grep -E '^(STEP|PARAMS)' "$out/$m.moved.txt") >"$out/$m.diff"; then
		echo "$m: loss sequence and parameters identical with $moves moves"
	else
		echo "$m: outputs DIFFER ($out/$m.diff)"; failed=1
	fi
	return $failed
}

hold() {
	local failed=0
	printf '%-8s %-12s %-12s %-16s %s\n' GiB migrate_ms gap_ms server_pause pattern_same >"$out/hold.table"
	for gib in $sizes; do
		echo "== hold $gib GiB"
		local f=$out/hold.$gib.txt
		remote "hold-$gib" "${addr[a]}" "$py" "$prog" hold "$gib" "$hold_steps" >"$f" 2>"$out/hold.$gib.err" &
		local p=$! ms=failed
		if wait_line "$f" "^STEP 5 " "$p"; then
			ms=$(move "hold-$gib" a b) || { ms=failed; failed=1; }
		fi
		wait "$p" || { echo "hold $gib exited $? (hold.$gib.err)"; failed=1; }
		# The server's pause of this move (a's log also has the train moves').
		local pause=pause=-
		[[ $ms == failed ]] || pause=$(grep 'msg="session moved"' "$out/remoted.a.log" | tail -1 | grep -o 'pause=[^ ]*' || echo pause=-)
		printf '%-8s %-12s %-12s %-16s %s\n' "$gib" "$ms" "$(awk '/^GAP_MS/ {print $2}' "$f")" "${pause#pause=}" \
			"$(awk '/^PATTERN_SAME/ {print $2}' "$f")" >>"$out/hold.table"
	done
	cat "$out/hold.table"
	return $failed
}

rc=0
case $mode in
train) train || rc=1 ;;
pipeline) train pipeline || rc=1 ;;
hold) hold || rc=1 ;;
all)
	train || rc=1
	hold || rc=1
	;;
*)
	echo "usage: $0 train|pipeline|hold|all" >&2
	exit 2
	;;
esac
echo "logs and outputs: $out"
exit $rc
