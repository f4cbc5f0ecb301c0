# PyTorch under the compute limit: bf16 matmuls back to back for SECS;
# prints iterations per second.
import os, sys, time
import torch
secs = float(sys.argv[1])
a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
for _ in range(10):
    a @ b
torch.cuda.synchronize()
at = os.environ.get("START_AT")
if at:
    while time.time() < float(at):
        pass
t0 = time.time()
n = 0
while time.time() - t0 < secs:
    for _ in range(10):
        c = a @ b
    n += 10
torch.cuda.synchronize()
print(f"ITERS_PER_S {n / (time.time() - t0):.1f}")
