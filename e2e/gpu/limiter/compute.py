"""GPU time under a limiter, as a PyTorch program uses it.

Usage: python3 compute.py spin <seconds> | launches <count>

  spin S       bf16 4096×4096 matmuls back to back for S seconds (after a
               warm-up); prints "RATE <matmuls per second>"
  launches N   N tiny elementwise kernels, synchronised at the end, after a
               warm-up; prints "LAUNCH_US <microseconds per launch>"
"""
import sys
import time

import torch


def spin(secs):
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    for _ in range(20):
        a @ b
    torch.cuda.synchronize()
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < secs:
        for _ in range(10):
            a @ b
        torch.cuda.synchronize()
        n += 10
    print(f"RATE {n / (time.perf_counter() - start):.1f}", flush=True)


def launches(count):
    x = torch.zeros(256, device="cuda")
    for _ in range(1000):
        x.add_(1)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(count):
        x.add_(1)
    torch.cuda.synchronize()
    print(f"LAUNCH_US {(time.perf_counter() - start) / count * 1e6:.3f}", flush=True)


if __name__ == "__main__":
    {"spin": lambda: spin(float(sys.argv[2])), "launches": lambda: launches(int(sys.argv[2]))}[sys.argv[1]]()
