"""One worker of the MPS benchmark (plugin/realgpu_mps_bench_test.go).

    python3 mps_bench.py <workload> <ops> <barrier_dir>

Warms up, creates <barrier_dir>/ready.<pid>, waits for <barrier_dir>/go (so
that concurrent workers start together), runs <ops> operations, synchronising
after each, and prints one JSON line: {"ops", "seconds", "lat_p50_ms",
"lat_p99_ms"}.

Workloads leave an H200 underoccupied on purpose, as many small jobs do:
  matmul  ten bf16 1024x1024 matrix products per operation
  infer   one forward pass of a 4-layer bf16 MLP (width 1024) at batch 8
"""
import json
import os
import sys
import time

import torch


def make(workload):
    dev = torch.device("cuda")
    if workload == "matmul":
        a = torch.randn(1024, 1024, device=dev, dtype=torch.bfloat16)
        b = torch.randn(1024, 1024, device=dev, dtype=torch.bfloat16)

        def op():
            for _ in range(10):
                torch.matmul(a, b)
        return op
    if workload == "infer":
        layers = [torch.nn.Linear(1024, 1024) for _ in range(4)]
        model = torch.nn.Sequential(*[m for l in layers for m in (l, torch.nn.ReLU())]).to(dev, torch.bfloat16).eval()
        x = torch.randn(8, 1024, device=dev, dtype=torch.bfloat16)

        def op():
            with torch.no_grad():
                model(x)
        return op
    raise SystemExit(f"unknown workload {workload!r} (matmul, infer)")


def main():
    workload, ops, barrier = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    op = make(workload)
    for _ in range(50):
        op()
    torch.cuda.synchronize()
    open(os.path.join(barrier, f"ready.{os.getpid()}"), "w").close()
    while not os.path.exists(os.path.join(barrier, "go")):
        time.sleep(0.001)
    lat = []
    t0 = time.perf_counter()
    for _ in range(ops):
        s = time.perf_counter()
        op()
        torch.cuda.synchronize()
        lat.append(time.perf_counter() - s)
    total = time.perf_counter() - t0
    lat.sort()
    print(json.dumps({"ops": ops, "seconds": total,
                      "lat_p50_ms": 1000 * lat[len(lat) // 2],
                      "lat_p99_ms": 1000 * lat[int(len(lat) * 0.99)]}))


if __name__ == "__main__":
    main()
