"""Memory under gpumux's limiter, as PyTorch sees it.

Usage: python3 memory.py report|fill <GiB>|hold <GiB> <seconds>|train <steps>

  report        prints torch.cuda.mem_get_info() and the device's total memory
  fill N        allocates 1 GiB tensors until N GiB or an out-of-memory error,
                prints how many it got ("FILLED k") and the error if any
  hold N S      allocates N GiB at once ("HELD N" or "OOM"), then sleeps S s
  train N       trains a small MLP (Linear, GELU, LayerNorm, AdamW) for N
                steps; prints the loss every 10 steps and the peak memory
                PyTorch reserved ("PEAK_RESERVED bytes")
"""
import sys
import time

import torch

GiB = 1 << 30


def report():
    free, total = torch.cuda.mem_get_info()
    props = torch.cuda.get_device_properties(0)
    print(f"MEM_GET_INFO free={free} total={total}")
    print(f"DEVICE_TOTAL {props.total_memory}")


def fill(n):
    held = []
    try:
        for _ in range(n):
            held.append(torch.empty(GiB, dtype=torch.uint8, device="cuda"))
        print(f"FILLED {len(held)}")
    except torch.OutOfMemoryError as e:
        print(f"FILLED {len(held)}")
        print("OOM " + str(e).splitlines()[0][:160])


def hold(n, secs):
    try:
        x = torch.empty(n * GiB, dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        print(f"HELD {n}", flush=True)
    except torch.OutOfMemoryError:
        print("OOM", flush=True)
        return
    time.sleep(secs)
    del x


def train(steps):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.LayerNorm(4096), torch.nn.Linear(4096, 10)
    ).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(512, 1024, device="cuda")
    y = torch.randint(0, 10, (512,), device="cuda")
    for step in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        if step % 10 == 0:
            print(f"STEP {step} LOSS {loss.item():.6f}")
    torch.cuda.synchronize()
    print(f"PEAK_RESERVED {torch.cuda.max_memory_reserved()}")


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "report":
        report()
    elif cmd == "fill":
        fill(int(sys.argv[2]))
    elif cmd == "hold":
        hold(int(sys.argv[2]), float(sys.argv[3]))
    elif cmd == "train":
        train(int(sys.argv[2]))
    else:
        sys.exit(__doc__)
