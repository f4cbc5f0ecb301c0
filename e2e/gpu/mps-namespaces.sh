#!/bin/bash
# Run from the repository root on a GPU machine: bash e2e/gpu/mps-namespaces.sh
# Does an MPS client need the server's /dev/shm or IPC namespace? (read-only
# experiment: private MPS daemon, no change to the card's settings)
set -u
nvcc -O2 -o /tmp/mpsprobe e2e/gpu/mpsprobe.cu
d=$(mktemp -d /tmp/mpsx.XXXX); export CUDA_MPS_PIPE_DIRECTORY=$d/pipe CUDA_MPS_LOG_DIRECTORY=$d/log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
export CUDA_VISIBLE_DEVICES=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
nvidia-cuda-mps-control -d; sleep 0.5
echo set_default_active_thread_percentage 25 | nvidia-cuda-mps-control
ls /dev/shm > /tmp/shm.before
echo "plain client:           $(/tmp/mpsprobe sm)"
echo "/dev/shm after the server started: $(comm -13 /tmp/shm.before <(ls /dev/shm) | tr '\n' ' ') (all: $(ls /dev/shm | wc -l))"
echo "private tmpfs /dev/shm:  $(unshare -m sh -c 'mount -t tmpfs tmpfs /dev/shm && /tmp/mpsprobe sm' 2>&1)"
echo "private IPC namespace:   $(unshare -i /tmp/mpsprobe sm 2>&1)"
echo "private IPC + tmpfs shm: $(unshare -m -i sh -c 'mount -t tmpfs tmpfs /dev/shm && /tmp/mpsprobe sm' 2>&1)"
mkdir -p $d/shm; mount --bind /dev/shm $d/shm
echo "host shm bind-mounted in a private mount ns + private IPC: $(unshare -m -i sh -c "mount -t tmpfs tmpfs /dev/shm && mount --bind $d/shm /dev/shm && /tmp/mpsprobe sm" 2>&1)"
umount $d/shm
echo "--- control.log tail"; tail -8 $CUDA_MPS_LOG_DIRECTORY/control.log; tail -5 $CUDA_MPS_LOG_DIRECTORY/server.log 2>/dev/null
echo quit | nvidia-cuda-mps-control; sleep 1; pgrep -a nvidia-cuda-mps || echo "no MPS process left"
