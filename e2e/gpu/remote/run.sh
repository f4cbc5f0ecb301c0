#!/usr/bin/env bash
# Remote GPUs on a real GPU machine (docs/validation.md, docs/benchmarks.md).
#
# Needs, carried from a build machine (`make gpu-bin`): .devbin/gpumux-remoted,
# .devbin/gpumux and bin/remote (libcuda.so.1, libnvidia-ml.so.1); and here
# nvcc and a C compiler.
#
#   e2e/gpu/remote/run.sh check   # milestone programs: local vs remote output, diffed
#   e2e/gpu/remote/run.sh bench   # local CUDA, gpumux-remoted over TCP and unix, plain sockets
#   e2e/gpu/remote/run.sh tls     # check over TLS (diffed with local), bench over TCP then TLS
#   e2e/gpu/remote/run.sh rt      # a CUDA runtime program (nvcc, static cudart): what happens
#   e2e/gpu/remote/run.sh trace   # what the static cudart asks of the real driver (darktrace.c)
#   e2e/gpu/remote/run.sh steal   # a tenant's kernel on another tenant's address, with and
#                                 # without --tenant-processes
#   e2e/gpu/remote/run.sh torch   # PyTorch (torch_check.py) locally and through gpumux-remoted, diffed
#   e2e/gpu/remote/run.sh nvml    # gpumux's NVML for remote shares: gpumux's nvidia-smi and PyTorch/NVML
#                                 # (nvml_check.py) through it, with an 8 GiB quota
#   e2e/gpu/remote/run.sh cublas  # cublasCreate and an SGEMM (cublas.cu): locally, under darktrace,
#                                 # and through gpumux-remoted
#   e2e/gpu/remote/run.sh corpus [PROGRAM...]
#                                 # the PyTorch corpus (corpus.py) locally, over TCP and over unix:
#                                 # outputs compared exactly, a table of results and step times;
#                                 # CORPUS_TRACE=1 also runs each under darktrace (private tables);
#                                 # CORPUS_CALLS=1 prints the calls each made over TCP (callcounts.py);
#                                 # CORPUS_ENV="K=V ..." sets variables for every run (local ones too);
#                                 # the environment reaches every run, local and remote alike:
#                                 # PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (virtual memory
#                                 # management) or =backend:cudaMallocAsync (memory pools)
#   e2e/gpu/remote/run.sh globals # where the driver puts a module global in fresh processes, per GPU,
#                                 # with and without setarch -R (globaladdr.c; why migrations translate)
#   e2e/gpu/remote/run.sh windows # whether a fresh process's driver leaves the 48 migration window bases
#                                 # free (windowbases.c), five processes per GPU, then five that hold
#                                 # the range PROT_NONE first (exits 1 there: the driver honours none)
#   e2e/gpu/remote/run.sh twogpu  # two GPUs through one server (twogpu.py, a token of --device 0,1):
#                                 # check and dataparallel diffed with local; copy bandwidth
#                                 # between the GPUs, local and through gpumux-remoted, side by side
# GPUMUX_REMOTE_DEBUG=1 makes the interposer log every failing call; REMOTED_FLAGS adds
# flags to gpumux-remoted's (e.g. REMOTED_FLAGS="--busy-poll 0").
#
# It starts gpumux-remoted (backend cuda) on 127.0.0.1 and a unix socket,
# with a fresh pool secret, and stops it on exit. It changes no GPU setting.
set -euo pipefail
cd "$(dirname "$0")/../../.."
root=$PWD
work=${WORK:-$(mktemp -d)}
out=${OUT:-$work}
mode=${1:-check}
cuda=${CUDA_HOME:-/usr/local/cuda}

build() {
	local k=e2e/gpu/remote/kernels.cu
	"$cuda/bin/nvcc" -arch=sm_90 -cubin -o "$work/kernels.cubin" "$k"
	"$cuda/bin/nvcc" -arch=sm_90 -ptx -o "$work/kernels.ptx" "$k"
	"$cuda/bin/nvcc" -arch=sm_90 -fatbin -o "$work/kernels.fatbin" "$k"
	for p in check bench steal; do
		cc -O2 -Wall -o "$work/$p" "e2e/gpu/remote/$p.c" -I"$cuda/include" -L"$cuda/lib64/stubs" -lcuda
	done
	cc -O2 -Wall -o "$work/sockbench" e2e/gpu/remote/sockbench.c
	"$cuda/bin/nvcc" -arch=sm_90 -o "$work/vectoradd" e2e/gpu/remote/vectoradd.cu
	"$cuda/bin/nvcc" -arch=sm_90 -o "$work/matrixmul" e2e/gpu/remote/matrixmul.cu
}

start_server() {
	[[ -s $work/pool.key ]] || .devbin/gpumux remote secret >"$work/pool.key"
	chmod 600 "$work/pool.key"
	port=$((20000 + RANDOM % 20000))
	.devbin/gpumux-remoted --backend cuda --listen "127.0.0.1:$port" --unix "$work/remoted.sock" \
		--token-file "$work/pool.key" ${REMOTED_FLAGS:-} "$@" >>"$out/remoted.log" 2>&1 &
	server=$!
	trap 'kill $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
	for _ in $(seq 100); do [[ -S $work/remoted.sock ]] && break; sleep 0.1; done
	token=$(.devbin/gpumux remote token --secret-file "$work/pool.key" --id bench --ttl 1h)
}

stop_server() {
	kill "$server"
	wait "$server" 2>/dev/null || true
	rm -f "$work/remoted.sock"
}

# steal_once: a victim tenant and a thief tenant on one server.
steal_once() {
	local victim thief
	victim=$(.devbin/gpumux remote token --secret-file "$work/pool.key" --id victim --ttl 1h)
	thief=$(.devbin/gpumux remote token --secret-file "$work/pool.key" --id thief --ttl 1h)
	coproc V { LD_LIBRARY_PATH="$root/bin/remote" GPUMUX_REMOTE_ADDR="127.0.0.1:$port" GPUMUX_REMOTE_TOKEN=$victim "$work/steal" victim "$work"; }
	local vpid=$V_PID
	read -r addr <&"${V[0]}"
	LD_LIBRARY_PATH="$root/bin/remote" GPUMUX_REMOTE_ADDR="127.0.0.1:$port" GPUMUX_REMOTE_TOKEN=$thief "$work/steal" thief "$work" "$addr"
	echo go >&"${V[1]}"
	cat <&"${V[0]}"
	wait "$vpid" || true
}

# remote ADDR CMD...: run CMD with the interposer in front of the driver.
remote() {
	local addr=$1
	shift
	LD_LIBRARY_PATH="$root/bin/remote" GPUMUX_REMOTE_ADDR=$addr GPUMUX_REMOTE_TOKEN=$token "$@"
}

# darktrace: build the tracing libcuda.so.1 in $work/trace; every cu* symbol
# of the real driver that darktrace.c does not define jumps to the real one.
darktrace() {
	mkdir -p "$work/trace"
	real=$(ldconfig -p | awk '/libcuda\.so\.1 .*x86-64/ {print $NF; exit}')
	local own='^(cuGetExportTable|cuGetProcAddress|cuGetProcAddress_v2|cuInit|cuDriverGetVersion)$'
	{
		echo '#include <dlfcn.h>'
		echo '#include <stdlib.h>'
		nm -D --defined-only "$real" | awk '$3 ~ /^cu/ {print $3}' | grep -vE "$own" | sort -u | while read -r n; do
			printf '__attribute__((visibility("hidden"))) void *dt_%s;\n' "$n"
			printf '__asm__(".globl %s\\n.type %s,@function\\n%s: jmp *dt_%s(%%rip)");\n' "$n" "$n" "$n" "$n"
		done
		echo '__attribute__((constructor)) static void dt_init(void) {'
		echo '	void *h = dlopen(getenv("DARKTRACE_REAL"), RTLD_NOW | RTLD_LOCAL);'
		echo '	if (!h) return;'
		nm -D --defined-only "$real" | awk '$3 ~ /^cu/ {print $3}' | grep -vE "$own" | sort -u | while read -r n; do
			printf '\tdt_%s = dlsym(h, "%s");\n' "$n" "$n"
		done
		echo '}'
	} >"$work/trace/darktrace_fwd.c"
	cc -O2 -Wall -Wextra -shared -fPIC -o "$work/trace/libcuda.so.1" e2e/gpu/remote/darktrace.c \
		"$work/trace/darktrace_fwd.c" remote/interposer/gm_md2.c -ldl -lpthread
}

if [[ $mode == trace ]]; then
	darktrace
	"$cuda/bin/nvcc" -arch=sm_90 -o "$work/vectoradd" e2e/gpu/remote/vectoradd.cu
	LD_LIBRARY_PATH="$work/trace" DARKTRACE_REAL=$real "$work/vectoradd" 2>"$out/trace.txt" || echo "vectoradd under darktrace: exit $?"
	grep -v cuGetProcAddress "$out/trace.txt" | head -150
	exit 0
fi
if [[ $mode == nvml ]]; then
	py=${PYTHON:-python3}
	start_server
	quota=$((8 << 30))
	token=$(.devbin/gpumux remote token --secret-file "$work/pool.key" --id nvml --quota 8Gi --ttl 1h)
	addr="127.0.0.1:$port"
	echo "== local nvidia-smi"
	nvidia-smi --query-gpu=name,uuid,pci.bus_id,memory.total,memory.used --format=csv || true
	for args in "-L" "--query-gpu=name,uuid,pci.bus_id,memory.total,memory.used --format=csv" "" "-q"; do
		echo "== gpumux's nvidia-smi $args (bin/remote/nvidia-smi), through gpumux's NVML"
		# shellcheck disable=SC2086
		remote "$addr" timeout 60 bin/remote/nvidia-smi $args || echo "nvidia-smi $args: exit $?"
	done
	echo "== NVIDIA's nvidia-smi -L through gpumux's NVML (refused: it needs the driver's private table)"
	remote "$addr" timeout 60 nvidia-smi -L || echo "nvidia-smi -L: exit $?"
	echo "== PyTorch and NVML (nvml_check.py), through gpumux's NVML"
	GM_QUOTA=$quota GPUMUX_REMOTE_TIMEOUT=120 remote "$addr" timeout 150 "$py" e2e/gpu/remote/nvml_check.py ||
		echo "nvml_check.py: exit $?"
	echo "== PYTORCH_NVML_BASED_CUDA_CHECK=1"
	PYTORCH_NVML_BASED_CUDA_CHECK=1 remote "$addr" timeout 60 "$py" -c \
		'import torch; print("is_available", torch.cuda.is_available(), "device_count", torch.cuda.device_count())' ||
		echo "exit $?"
	echo "== gpumux-remoted (warnings and errors)"
	grep -iE 'level=(warn|error)' "$out/remoted.log" | tail -10 || true
	exit 0
fi
if [[ $mode == torch ]]; then
	py=${PYTHON:-python3}
	timeout 120 "$py" e2e/gpu/remote/torch_check.py >"$out/torch.local.txt" 2>"$out/torch.local.err" || echo "torch locally: exit $?"
	start_server
	GPUMUX_REMOTE_TIMEOUT=120 remote "127.0.0.1:$port" timeout 150 "$py" e2e/gpu/remote/torch_check.py \
		>"$out/torch.tcp.txt" 2>"$out/torch.tcp.err" || echo "torch through gpumux-remoted: exit $?"
	echo "== local"
	cat "$out/torch.local.txt"
	echo "== through gpumux-remoted (stderr: interposer messages, last lines)"
	grep -v '^\s*$' "$out/torch.tcp.err" | tail -40
	echo "== gpumux-remoted (warnings and errors)"
	grep -iE 'level=(warn|error)' "$out/remoted.log" | tail -10 || true
	diff -u "$out/torch.local.txt" "$out/torch.tcp.txt" && echo "torch: output through gpumux-remoted identical to local"
	exit 0
fi
if [[ $mode == twogpu ]]; then
	py=${PYTHON:-python3}
	gpus=$(nvidia-smi -L | grep -c '^GPU ' || true)
	[[ $gpus -ge 2 ]] || { echo "twogpu: needs two GPUs, nvidia-smi lists $gpus" >&2; exit 2; }
	mkdir -p "$out/twogpu"
	for what in "check ${TWOGPU_STEPS:-20}" dataparallel bw; do
		f=$out/twogpu/${what%% *}
		# shellcheck disable=SC2086
		timeout 300 "$py" e2e/gpu/remote/twogpu.py $what >"$f.local" 2>"$f.local.err" || echo "twogpu $what locally: exit $?"
	done
	start_server
	token=$(.devbin/gpumux remote token --secret-file "$work/pool.key" --id twogpu --device 0,1 --ttl 1h)
	rc=0
	for what in "check ${TWOGPU_STEPS:-20}" dataparallel bw; do
		f=$out/twogpu/${what%% *}
		# shellcheck disable=SC2086
		GPUMUX_REMOTE_TIMEOUT=120 remote "127.0.0.1:$port" timeout 300 "$py" e2e/gpu/remote/twogpu.py $what \
			>"$f.remote" 2>"$f.remote.err" || echo "twogpu $what through gpumux-remoted: exit $?"
	done
	for what in check dataparallel; do
		f=$out/twogpu/$what
		echo "== $what locally"
		cat "$f.local"
		if diff -u "$f.local" "$f.remote"; then
			echo "twogpu $what: output through gpumux-remoted identical to local"
		else
			rc=1
			echo "twogpu $what: DIFFERS; the interposer's last messages:"
			grep -v '^\s*$' "$f.remote.err" | tail -15
		fi
	done
	echo "== copy bandwidth between the GPUs (GB/s, wall time to both GPUs done)"
	printf '%-6s %-10s %-10s %-10s %s\n' way size local remote "remote/local"
	awk 'FNR == NR && /^BW/ {l[$2 " " $3] = $5; next}
		/^BW/ && ($2 " " $3) in l {printf "%-6s %-10s %-10s %-10s %.2f\n", $2, $3 " MiB", l[$2 " " $3], $5, $5 / l[$2 " " $3]}' \
		"$out/twogpu/bw.local" "$out/twogpu/bw.remote"
	echo "== gpumux-remoted (warnings and errors)"
	grep -iE 'level=(warn|error)' "$out/remoted.log" | tail -10 || true
	exit $rc
fi
if [[ $mode == corpus ]]; then
	py=${PYTHON:-python3}
	shift
	progs=("$@")
	[[ ${#progs[@]} -gt 0 ]] || read -ra progs <<<"$("$py" e2e/gpu/remote/corpus.py list)"
	mkdir -p "$out/corpus"
	[[ -n ${CORPUS_TRACE:-} ]] && darktrace
	metrics=()
	if [[ -n ${CORPUS_CALLS:-} ]]; then
		mport=$((20000 + RANDOM % 20000))
		metrics=(--metrics-addr "127.0.0.1:$mport")
	fi
	start_server "${metrics[@]}"
	read -ra corpus_env <<<"${CORPUS_ENV:-}"
	# runs P HOW: one program, locally (local), under darktrace (trace)
	# or through the server (tcp, unix); its output without timings in
	# $out/corpus/P.HOW, stderr in P.HOW.err; prints the exit status.
	runs() {
		local p=$1 how=$2 pre=()
		case $how in
		tcp) pre=(remote "127.0.0.1:$port") ;;
		unix) pre=(remote "unix:$work/remoted.sock") ;;
		trace) pre=(env LD_LIBRARY_PATH="$work/trace" DARKTRACE_REAL="$real") ;;
		esac
		local rc=0 scrape=
		[[ $how == tcp && -n ${CORPUS_CALLS:-} ]] && scrape=http://127.0.0.1:$mport/metrics
		[[ -z $scrape ]] || "$py" e2e/gpu/remote/callcounts.py scrape "$scrape" "$out/corpus/$p.calls.before"
		(
			for kv in "${corpus_env[@]}"; do export "${kv?}"; done
			GPUMUX_REMOTE_TIMEOUT=120 "${pre[@]}" timeout "${CORPUS_TIMEOUT:-600}" "$py" e2e/gpu/remote/corpus.py "$p"
		) >"$out/corpus/$p.$how.raw" 2>"$out/corpus/$p.$how.err" || rc=$?
		[[ -z $scrape ]] || "$py" e2e/gpu/remote/callcounts.py scrape "$scrape" "$out/corpus/$p.calls.after"
		grep -v '^STEP_MS' "$out/corpus/$p.$how.raw" >"$out/corpus/$p.$how" || true
		echo "$rc"
	}
	ms() { awk '/^STEP_MS/ {print $2}' "$out/corpus/$1.$2.raw"; }
	printf '%-16s %-10s %-10s %-10s %-12s %-12s %-12s\n' program local tcp unix "local ms" "tcp ×" "unix ×"
	for p in "${progs[@]}"; do
		[[ -n ${CORPUS_TRACE:-} ]] && runs "$p" trace >/dev/null
		row=("$p")
		lrc=$(runs "$p" local)
		row+=("$([[ $lrc == 0 ]] && echo ok || echo "exit $lrc")")
		for how in tcp unix; do
			rc=$(runs "$p" $how)
			if [[ $rc != 0 ]]; then
				row+=("exit $rc")
			elif [[ $lrc == 0 ]] && cmp -s "$out/corpus/$p.local" "$out/corpus/$p.$how"; then
				row+=(same)
			else
				row+=(DIFFERS)
			fi
		done
		l=$(ms "$p" local) t=$(ms "$p" tcp) u=$(ms "$p" unix)
		ratio() { [[ -n $1 && -n $2 ]] && python3 -c "print(f'{$2/$1:.2f}')" || echo -; }
		printf '%-16s %-10s %-10s %-10s %-12s %-12s %-12s\n' "${row[@]}" "${l:--}" "$(ratio "$l" "$t")" "$(ratio "$l" "$u")"
	done
	for p in "${progs[@]}"; do
		if [[ -n ${CORPUS_CALLS:-} ]]; then
			echo "== $p over tcp: the calls it made most"
			"$py" e2e/gpu/remote/callcounts.py diff "$out/corpus/$p.calls.before" "$out/corpus/$p.calls.after"
		fi
		for how in tcp unix; do
			if ! cmp -s "$out/corpus/$p.local" "$out/corpus/$p.$how"; then
				echo "== $p over $how: first differences, and the interposer's messages"
				diff "$out/corpus/$p.local" "$out/corpus/$p.$how" | head -8
				grep -v '^\s*$' "$out/corpus/$p.$how.err" | sort | uniq -c | sort -rn | head -25
			fi
		done
	done
	exit 0
fi
if [[ $mode == cublas ]]; then
	darktrace
	"$cuda/bin/nvcc" -arch=sm_90 -o "$work/cublas" e2e/gpu/remote/cublas.cu -lcublas
	"$work/cublas" >"$out/cublas.local.txt" || echo "cublas locally: exit $?"
	LD_LIBRARY_PATH="$work/trace:$cuda/lib64" DARKTRACE_REAL=$real "$work/cublas" >"$out/cublas.darktrace.txt" 2>"$out/cublas.trace.txt" || echo "cublas under darktrace: exit $?"
	start_server
	remote "127.0.0.1:$port" "$work/cublas" >"$out/cublas.tcp.txt" 2>"$out/cublas.tcp.err" || echo "cublas through gpumux-remoted: exit $?"
	echo "== darktrace: tables asked for (in order), then table slots called (Tn: the n-th table asked for)"
	grep -oE 'cuGetExportTable\([^)]*\) = -?[0-9]+' "$out/cublas.trace.txt" | awk '!seen[$0]++' | head -20
	grep -oE 'T[0-9]+\[[0-9]+\]\(' "$out/cublas.trace.txt" | sort | uniq -c | sort -rn | head -30
	echo "== darktrace: the tools tables' answers against the real driver's public calls"
	grep -E 'darktrace:   check' "$out/cublas.trace.txt" | awk '!seen[$0]++' | head -12
	echo "== under darktrace (stdout)"
	cat "$out/cublas.darktrace.txt"
	echo "== through gpumux-remoted (stderr, last lines)"
	grep -v '^\s*$' "$out/cublas.tcp.err" | tail -40
	diff -u "$out/cublas.local.txt" "$out/cublas.tcp.txt" && echo "cublas: output through gpumux-remoted identical to local"
	exit 0
fi
if [[ $mode == windows ]]; then
	cc -O2 -Wall -o "$work/windowbases" e2e/gpu/remote/windowbases.c -I"$cuda/include" -L"$cuda/lib64/stubs" -lcuda
	rc=0
	for d in $(seq 0 $(($(nvidia-smi -L | grep -c '^GPU ') - 1))); do
		echo "== GPU $d"
		for run in 1 2 3 4 5; do "$work/windowbases" "$d" || rc=1; done
		for run in 1 2 3 4 5; do "$work/windowbases" "$d" hold || true; done
	done
	exit $rc
fi
build
if [[ $mode == globals ]]; then
	cc -O2 -Wall -o "$work/globaladdr" e2e/gpu/remote/globaladdr.c -I"$cuda/include" -L"$cuda/lib64/stubs" -lcuda
	for d in $(seq 0 $(($(nvidia-smi -L | grep -c '^GPU ') - 1))); do
		for run in 1 2; do "$work/globaladdr" "$d" "$work/kernels.cubin"; done
		for run in 1 2; do printf 'setarch -R: '; setarch "$(uname -m)" -R "$work/globaladdr" "$d" "$work/kernels.cubin"; done
	done
	exit 0
fi
if [[ $mode == steal ]]; then
	echo "== one worker process per tenant (the default)"
	start_server
	steal_once
	stop_server
	echo "== --tenant-processes=false: every tenant in one process"
	start_server --tenant-processes=false
	steal_once
	exit 0
fi
if [[ $mode == tls ]]; then
	# A throwaway CA and a certificate for 127.0.0.1 (docs/remote.md, TLS).
	tls=$work/tls
	mkdir -p "$tls"
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=gpumux-bench-ca \
		-keyout "$tls/ca.key" -out "$tls/ca.pem" 2>/dev/null
	openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=gpumux-bench \
		-keyout "$tls/server.key" -out "$tls/server.csr" 2>/dev/null
	printf 'subjectAltName=IP:127.0.0.1\n' >"$tls/server.ext"
	openssl x509 -req -in "$tls/server.csr" -CA "$tls/ca.pem" -CAkey "$tls/ca.key" -CAcreateserial -days 1 \
		-extfile "$tls/server.ext" -out "$tls/server.pem" 2>/dev/null
	"$work/check" "$work" >"$out/check.local.txt"
	start_server
	remote "127.0.0.1:$port" "$work/bench" "$work" >"$out/bench.tcp.txt"
	stop_server
	start_server --tls-cert-file "$tls/server.pem" --tls-key-file "$tls/server.key"
	GPUMUX_REMOTE_TLS_CA=$tls/ca.pem remote "127.0.0.1:$port" "$work/check" "$work" >"$out/check.tls.txt"
	diff -u "$out/check.local.txt" "$out/check.tls.txt" && echo "check: TLS output identical to local"
	GPUMUX_REMOTE_TLS_CA=$tls/ca.pem remote "127.0.0.1:$port" "$work/bench" "$work" >"$out/bench.tls.txt"
	for f in tcp tls; do echo "== bench $f"; cat "$out/bench.$f.txt"; done
	exit 0
fi
start_server
case $mode in
rt)
	for p in vectoradd matrixmul; do
		"$work/$p" >"$out/$p.local.txt" || echo "$p locally: exit $?"
		remote "127.0.0.1:$port" "$work/$p" >"$out/$p.tcp.txt" 2>"$out/$p.tcp.err" || echo "$p through gpumux-remoted: exit $?"
		cat "$out/$p.local.txt" "$out/$p.tcp.err"
		diff -u "$out/$p.local.txt" "$out/$p.tcp.txt" && echo "$p: output through gpumux-remoted identical to local"
	done
	;;
check)
	"$work/check" "$work" >"$out/check.local.txt"
	remote "127.0.0.1:$port" "$work/check" "$work" >"$out/check.tcp.txt"
	remote "unix:$work/remoted.sock" "$work/check" "$work" >"$out/check.unix.txt"
	cat "$out/check.local.txt"
	diff -u "$out/check.local.txt" "$out/check.tcp.txt" && echo "check: TCP output identical to local"
	diff -u "$out/check.local.txt" "$out/check.unix.txt" && echo "check: unix output identical to local"
	;;
bench)
	"$work/bench" "$work" >"$out/bench.local.txt"
	remote "127.0.0.1:$port" "$work/bench" "$work" >"$out/bench.tcp.txt"
	remote "unix:$work/remoted.sock" "$work/bench" "$work" >"$out/bench.unix.txt"
	"$work/sockbench" tcp >"$out/sock.tcp.txt"
	"$work/sockbench" unix >"$out/sock.unix.txt"
	for f in local tcp unix; do echo "== bench $f"; cat "$out/bench.$f.txt"; done
	for f in tcp unix; do echo "== plain socket $f"; cat "$out/sock.$f.txt"; done
	;;
*)
	echo "usage: $0 check|bench|tls|rt|trace|steal|torch|cublas|corpus|twogpu|globals" >&2
	exit 2
	;;
esac
