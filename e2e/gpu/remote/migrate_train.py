"""A PyTorch program that a live migration must not disturb (migrate.sh).

Usage: python3 migrate_train.py train STEPS
       python3 migrate_train.py pipeline STEPS
       python3 migrate_train.py hold GIB STEPS

train: seeds everything, asks for deterministic algorithms and trains a
small convolutional network (cuDNN) with a transformer block (cuBLAS) and
AdamW for STEPS steps, printing "STEP i LOSS <float.hex>" after every step
(flushed: migrate.sh triggers moves from these lines) and the parameters'
checksum at the end. Runs with and without moves must print the same lines.

pipeline: the same network and a head compiled by torch.compile (Inductor:
Triton kernels) trained under bf16 autocast on batches that a DataLoader's
worker processes make and pin, copied without blocking; printed as train.

hold: fills GIB GiB of device memory with a seeded pattern, then runs STEPS
small steps (a kernel and a synchronizing .item(), 50 ms apart), printing
"STEP i" and the step's wall time; at the end the pattern's checksum, which must be the
one computed before the first step, and "GAP_MS" the longest step: with one
move during the run, that is the pause the program saw.
"""
import os
import sys
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

torch.manual_seed(0)
torch.backends.cudnn.deterministic = True
torch.backends.cudnn.benchmark = False
torch.use_deterministic_algorithms(True)
dev = torch.device("cuda")


def say(*a):
    print(*a, flush=True)


class Net(nn.Module):
    def __init__(self, d=128, h=4):
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
            nn.Conv2d(32, d, 3, stride=2, padding=1), nn.ReLU())
        self.attn = nn.TransformerEncoderLayer(d, h, 4 * d, dropout=0.0, batch_first=True)
        self.head = nn.Linear(d, 10)

    def forward(self, x):
        z = self.conv(x).flatten(2).transpose(1, 2)  # (B, 256 tokens, d)
        return self.head(self.attn(z).mean(1))


def train(steps):
    model = Net().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(32, 3, 32, 32, generator=g).to(dev)
    y = torch.randint(0, 10, (32,), generator=g).to(dev)
    for i in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        say(f"STEP {i} LOSS {loss.item().hex()}")
    s = sum(p.detach().double().sum().item() for p in model.parameters())
    say(f"PARAMS {s.hex()}")


class Batches(torch.utils.data.Dataset):
    """Seeded images and labels, made in the DataLoader's worker processes."""

    def __len__(self):
        return 1 << 20

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return torch.randn(3, 32, 32, generator=g), int(torch.randint(0, 10, (1,), generator=g))


def pipeline(steps):
    model = Net().to(dev)
    head = nn.Sequential(nn.Linear(10, 64), nn.GELU(), nn.Linear(64, 10)).to(dev)
    chead = torch.compile(head)
    opt = torch.optim.AdamW(list(model.parameters()) + list(head.parameters()), lr=1e-3)
    dl = torch.utils.data.DataLoader(Batches(), batch_size=32, num_workers=2, pin_memory=True)
    for i, (x, y) in zip(range(steps), dl):
        assert x.is_pinned(), "the DataLoader did not pin the batch"
        x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(chead(model(x)).float(), y)
        loss.backward()
        opt.step()
        say(f"STEP {i} LOSS {loss.item().hex()}")
    s = sum(p.detach().double().sum().item() for p in list(model.parameters()) + list(head.parameters()))
    say(f"PARAMS {s.hex()}")


def hold(gib, steps):
    n = int(gib * (1 << 30)) // 4
    g = torch.Generator(device=dev).manual_seed(2)
    big = torch.randint(-(1 << 30), 1 << 30, (n,), dtype=torch.int32, device=dev, generator=g)
    before = big.double().sum().item() if gib <= 4 else int(big[:: 1 << 10].sum().item())
    a = torch.randn(1024, 1024, device=dev)
    gap = 0.0
    for i in range(steps):
        t0 = time.perf_counter()
        a = torch.tanh(a @ a.T * 1e-3)
        a.sum().item()
        ms = 1000 * (time.perf_counter() - t0)
        gap = max(gap, ms)
        say(f"STEP {i} {ms:.3f}")
        # Untimed: the steps last long enough for a move triggered at
        # one of them to land in a later one, not after the last.
        time.sleep(0.05)
    after = big.double().sum().item() if gib <= 4 else int(big[:: 1 << 10].sum().item())
    say(f"PATTERN_SAME {before == after}")
    say(f"GAP_MS {gap:.1f}")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "train":
        train(int(sys.argv[2]))
    elif len(sys.argv) == 3 and sys.argv[1] == "pipeline":
        pipeline(int(sys.argv[2]))
    elif len(sys.argv) == 4 and sys.argv[1] == "hold":
        hold(float(sys.argv[2]), int(sys.argv[3]))
    else:
        sys.exit(__doc__)
    say("DONE")
