#!/bin/bash
# Probe real nvidia-cuda-mps-control behaviour. Output to stdout.
set -u
H=$(dirname "$0")
C=nvidia-cuda-mps-control
sec() { echo; echo "===== $*"; }
cmd() { # cmd <pipe> <log> <lines...>
  local p=$1 l=$2; shift 2
  local s=$(date +%s%N)
  printf '%s\n' "$@" | CUDA_MPS_PIPE_DIRECTORY=$p CUDA_MPS_LOG_DIRECTORY=$l timeout 20 $C >/tmp/o 2>/tmp/e; local rc=$?
  local d=$(( ($(date +%s%N) - s) / 1000000 ))ms
  echo "--> $* : rc=$rc ($d)"; echo "stdout:"; sed 's/^/  | /' /tmp/o | cat -A | head -20; echo "stderr:"; sed 's/^/  | /' /tmp/e | head -10
}
lsd() { for d in "$@"; do echo "ls $d:"; ls -la --time-style=+ "$d" 2>&1 | sed 's/^/  /'; done; }
procs() { ps -eo pid,ppid,pgid,sid,stat,comm,args | grep -E 'mps|client' | grep -v grep | sed 's/^/  /'; }
sec versions; which $C nvidia-cuda-mps-server; nvidia-smi -L; nvidia-smi --query-gpu=driver_version,compute_mode --format=csv; uname -r
UUID=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
echo "uuid=$UUID"
nvcc -o /tmp/client $H/client1.cu 2>&1 | tail -3
R=/tmp/st/mps/$UUID; P=$R/pipe; L=$R/log
mkdir -p $P $L; chmod 755 $P $L
sec no daemon; cmd $P $L get_server_list
sec start; ( s=$(date +%s%N); CUDA_VISIBLE_DEVICES=$UUID CUDA_MPS_PIPE_DIRECTORY=$P CUDA_MPS_LOG_DIRECTORY=$L timeout 20 $C -d; echo "-d rc=$? after $(( ($(date +%s%N) - s) / 1000000 ))ms" )
sleep 0.5; procs; lsd $P $L; cat $P/nvidia-cuda-mps-control.pid 2>/dev/null; echo
stat -c '%n %F %a' $P/* 
sec commands
cmd $P $L get_server_list
cmd $P $L get_default_active_thread_percentage
cmd $P $L "set_default_active_thread_percentage 25"
cmd $P $L get_default_active_thread_percentage
cmd $P $L "get_default_device_pinned_mem_limit 0"
cmd $P $L "set_default_device_pinned_mem_limit 0 4G"
cmd $P $L "get_default_device_pinned_mem_limit 0"
cmd $P $L "set_default_device_pinned_mem_limit 0 4096M"
cmd $P $L "get_default_device_pinned_mem_limit 0"
cmd $P $L "set_default_device_pinned_mem_limit 0 3000M"
cmd $P $L "get_default_device_pinned_mem_limit 0"
cmd $P $L "get_default_device_pinned_mem_limit 1"
cmd $P $L "set_default_device_pinned_mem_limit 1 2G"
cmd $P $L "set_default_active_thread_percentage 0"
cmd $P $L "set_default_active_thread_percentage 150"
cmd $P $L "set_default_active_thread_percentage abc"
cmd $P $L bogus_command
cmd $P $L "get_client_list 12345"
cmd $P $L get_server_list get_default_active_thread_percentage "get_default_device_pinned_mem_limit 0"
cmd $P $L ""
sec second -d same dir; CUDA_VISIBLE_DEVICES=$UUID CUDA_MPS_PIPE_DIRECTORY=$P CUDA_MPS_LOG_DIRECTORY=$L timeout 20 $C -d; echo "rc=$?"; sleep 0.5; procs
sec client
CUDA_MPS_PIPE_DIRECTORY=$P CUDA_MPS_LOG_DIRECTORY=$L /tmp/client 5000 25 > /tmp/c1.out 2>&1 &
CP=$!
sleep 6; cat /tmp/c1.out; procs
cmd $P $L get_server_list
SP=$(cat /tmp/o | head -1)
cmd $P $L "get_client_list $SP"
cmd $P $L get_default_active_thread_percentage
cmd $P $L "get_default_device_pinned_mem_limit 0"
cmd $P $L "get_server_status $SP"
cmd $P $L "get_active_thread_percentage $SP"
lsd $P $L; stat -c '%n %F %a' $P/*
ls -la /dev/shm | head -20
sec client with lower own limits
CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=10 CUDA_MPS_PIPE_DIRECTORY=$P /tmp/client 100 3; 
sec kill -9 control while server+client
CTL=$(cat $P/nvidia-cuda-mps-control.pid); echo ctl=$CTL; kill -9 $CTL; sleep 1; procs; lsd $P; cat /tmp/c1.out
cmd $P $L get_server_list
sec restart without cleanup
CUDA_VISIBLE_DEVICES=$UUID CUDA_MPS_PIPE_DIRECTORY=$P CUDA_MPS_LOG_DIRECTORY=$L timeout 20 $C -d; echo "rc=$?"; sleep 1; procs; lsd $P
cmd $P $L get_server_list
cmd $P $L get_default_active_thread_percentage
sleep 3; cat /tmp/c1.out; procs
sec new client after restart
CUDA_MPS_PIPE_DIRECTORY=$P /tmp/client 100 2; cmd $P $L get_server_list; procs
sec quit with client
CUDA_MPS_PIPE_DIRECTORY=$P /tmp/client 100 20 > /tmp/c2.out 2>&1 &
sleep 4; cmd $P $L get_server_list; cmd $P $L quit; sleep 2; procs; cat /tmp/c2.out; lsd $P
cmd $P $L get_server_list
sec kill -9 with no server, then restart
CUDA_VISIBLE_DEVICES=$UUID CUDA_MPS_PIPE_DIRECTORY=$P CUDA_MPS_LOG_DIRECTORY=$L $C -d; sleep 0.5; CTL=$(cat $P/nvidia-cuda-mps-control.pid); kill -9 $CTL; sleep 0.5; lsd $P
CUDA_VISIBLE_DEVICES=$UUID CUDA_MPS_PIPE_DIRECTORY=$P CUDA_MPS_LOG_DIRECTORY=$L $C -d; echo rc=$?; sleep 0.5; procs; cmd $P $L get_server_list
cmd $P $L quit; sleep 1; lsd $P; procs
sec logs; for f in $L/*; do echo "== $f"; cat $f | head -80; done
sec long pipe dir
LP=/tmp/$(printf 'x%.0s' $(seq 1 80))/pipe; mkdir -p $LP; CUDA_VISIBLE_DEVICES=$UUID CUDA_MPS_PIPE_DIRECTORY=$LP CUDA_MPS_LOG_DIRECTORY=$L timeout 10 $C -d; echo rc=$?; sleep 0.5; cmd $LP $L get_server_list; ls $LP; cmd $LP $L quit
sec help; timeout 5 $C -h 2>&1 | head -40
