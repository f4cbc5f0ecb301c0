#!/bin/bash
set -u
C=nvidia-cuda-mps-control
nvcc -o /tmp/c2 $(dirname $0)/client2.cu 2>&1 | tail -2
UUID=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
P=/tmp/p2/pipe; L=/tmp/p2/log; mkdir -p $P $L
E="CUDA_VISIBLE_DEVICES=$UUID CUDA_MPS_PIPE_DIRECTORY=$P CUDA_MPS_LOG_DIRECTORY=$L"
echo "== A: client, then control daemon killed while it sleeps"
env $E $C -d; echo "set_default_active_thread_percentage 25" | env $E $C
env CUDA_MPS_PIPE_DIRECTORY=$P /tmp/c2 4 > /tmp/a.out 2>&1 &
sleep 2; CTL=$(cat $P/nvidia-cuda-mps-control.pid); kill -9 $CTL; sleep 0.3
ps -eo pid,ppid,stat,args | grep -E 'mps|c2' | grep -v grep
wait; cat /tmp/a.out
echo "== B: stale files, no daemon: new client"
ls $P; env CUDA_MPS_PIPE_DIRECTORY=$P timeout 30 /tmp/c2 0; echo rc=$?
echo "== C: stale files removed, no daemon: new client"
rm -f $P/*; env CUDA_MPS_PIPE_DIRECTORY=$P timeout 30 /tmp/c2 0; echo rc=$?
echo "== D: pipe dir missing"
env CUDA_MPS_PIPE_DIRECTORY=/tmp/p2/nonexistent timeout 30 /tmp/c2 0; echo rc=$?
echo "== E: hung (SIGSTOP) daemon: command and new client"
env $E $C -d; sleep 0.3; CTL=$(cat $P/nvidia-cuda-mps-control.pid); kill -STOP $CTL
s=$(date +%s%N); echo get_server_list | env $E timeout 5 $C; echo "cmd rc=$? after $(( ($(date +%s%N)-s)/1000000 ))ms"
s=$(date +%s%N); env CUDA_MPS_PIPE_DIRECTORY=$P timeout 8 /tmp/c2 0; echo "client rc=$? after $(( ($(date +%s%N)-s)/1000000 ))ms"
kill -CONT $CTL; sleep 0.5; echo get_server_list | env $E timeout 5 $C; echo "after CONT rc=$?"
echo "== F: quit with an active client"
env CUDA_MPS_PIPE_DIRECTORY=$P /tmp/c2 6 > /tmp/f.out 2>&1 &
sleep 2; s=$(date +%s%N); echo quit | env $E timeout 15 $C; echo "quit rc=$? after $(( ($(date +%s%N)-s)/1000000 ))ms"
wait; cat /tmp/f.out; ps -eo pid,stat,args | grep -E 'mps' | grep -v grep
echo "== G: client uid nobody with root daemon (pipe 0755)"
env $E $C -d; sleep 0.3; chmod 755 /tmp/p2 /tmp/p2/pipe
su -s /bin/sh nobody -c "CUDA_MPS_PIPE_DIRECTORY=$P timeout 30 /tmp/c2 0"; echo rc=$?
echo get_server_list | env $E $C; tail -5 $L/control.log
echo quit | env $E timeout 10 $C
