"""Two GPUs in one program (run.sh twogpu; issue 17): run locally and
through one gpumux-remoted serving both GPUs, its outputs are diffed.

Usage: python3 twogpu.py check STEPS   # what must be identical to local
       python3 twogpu.py dataparallel   # torch.nn.DataParallel (its own run)
       python3 twogpu.py bw             # copy bandwidth between the GPUs

check prints the device count and names, whether each GPU reaches the
other, a model's output on each GPU, peer copies both ways (bytes
checked), and STEPS data-parallel training steps over both GPUs written
out by hand: a replica per GPU, half the batch each, the second GPU's
gradients copied to the first and averaged there, the optimizer step on
the first and the parameters copied back to the second. Every float is
printed in hex, so "identical" means bit for bit. dataparallel does one
such training with torch.nn.DataParallel (its scatter, replicate and
gather; NCCL where PyTorch has it). bw prints "BW <bytes> <GB/s>" lines,
copies from cuda:0 to cuda:1 and back, timed from the first copy's call to
the end of both GPUs' work (what the program waits for); run.sh
puts the local and remote figures side by side.
"""
import copy
import os
import sys
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

torch.backends.cudnn.deterministic = True
torch.backends.cudnn.benchmark = False
torch.use_deterministic_algorithms(True)


def say(*a):
    print(*a, flush=True)


class Net(nn.Module):
    def __init__(self, d=64):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(),
                                  nn.Conv2d(16, d, 3, stride=2, padding=1), nn.ReLU())
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, 10))

    def forward(self, x):
        return self.mlp(self.conv(x).mean((2, 3)))


def checksum(t):
    return t.detach().double().sum().item().hex()


def data(g, n=32):
    return torch.randn(n, 3, 16, 16, generator=g), torch.randint(0, 10, (n,), generator=g)


def check(steps):
    n = torch.cuda.device_count()
    say("device_count", n)
    if n < 2:
        sys.exit("twogpu: needs two devices")
    for i in range(2):
        say(f"device {i}", torch.cuda.get_device_name(i))
    say("peer 0->1", torch.cuda.can_device_access_peer(0, 1), "1->0", torch.cuda.can_device_access_peer(1, 0))

    # A model placed on each GPU: the same weights give the same output.
    torch.manual_seed(0)
    m0 = Net().to("cuda:0").eval()
    m1 = copy.deepcopy(m0).to("cuda:1")
    x, _ = data(torch.Generator().manual_seed(1))
    with torch.no_grad():
        y0, y1 = m0(x.to("cuda:0")), m1(x.to("cuda:1"))
    say("model on cuda:0", checksum(y0), "on cuda:1", checksum(y1), "same", torch.equal(y0.cpu(), y1.cpu()))

    # Peer copies both ways, bytes checked against the host.
    g = torch.Generator().manual_seed(2)
    for mib in (1, 64, 512):
        h = torch.randint(-(1 << 31), (1 << 31) - 1, (mib << 18,), dtype=torch.int32, generator=g)
        a = h.to("cuda:0")
        b = a.to("cuda:1")
        back = (b + 1).to("cuda:0") - 1
        say(f"peer copy {mib} MiB: 0->1 same {torch.equal(b.cpu(), h)}, 1->0 same {torch.equal(back.cpu(), h)}")

    # Data-parallel training over both GPUs, by hand.
    torch.manual_seed(3)
    r0 = Net().to("cuda:0")
    r1 = copy.deepcopy(r0).to("cuda:1")
    opt = torch.optim.SGD(r0.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(4)
    for i in range(steps):
        x, y = data(g)
        l0 = F.cross_entropy(r0(x[:16].to("cuda:0")), y[:16].to("cuda:0"))
        l1 = F.cross_entropy(r1(x[16:].to("cuda:1")), y[16:].to("cuda:1"))
        l0.backward()
        l1.backward()
        with torch.no_grad():
            for p0, p1 in zip(r0.parameters(), r1.parameters()):
                p0.grad.add_(p1.grad.to("cuda:0")).mul_(0.5)
            opt.step()
            for p0, p1 in zip(r0.parameters(), r1.parameters()):
                p1.copy_(p0)
        opt.zero_grad(set_to_none=True)
        r1.zero_grad(set_to_none=True)
        say(f"STEP {i} LOSS {((l0 + l1.to('cuda:0')) / 2).item().hex()}")
    say("PARAMS cuda:0", checksum(torch.cat([p.flatten() for p in r0.parameters()])),
        "cuda:1", checksum(torch.cat([p.flatten() for p in r1.parameters()])))
    torch.cuda.synchronize(0)
    torch.cuda.synchronize(1)


def dataparallel():
    torch.manual_seed(3)
    model = nn.DataParallel(Net().to("cuda:0"), device_ids=[0, 1])
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(4)
    for i in range(10):
        x, y = data(g)
        loss = F.cross_entropy(model(x.to("cuda:0")), y.to("cuda:0"))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        say(f"DP STEP {i} LOSS {loss.item().hex()}")
    say("DP PARAMS", checksum(torch.cat([p.flatten() for p in model.parameters()])))


def bw():
    for mib in (1, 16, 256, 1024):
        n = mib << 20
        a = torch.empty(n, dtype=torch.uint8, device="cuda:0")
        b = torch.empty(n, dtype=torch.uint8, device="cuda:1")
        for src, dst, name in ((a, b, "0->1"), (b, a, "1->0")):
            reps = max(4, min(100, (4 << 30) // n))
            dst.copy_(src)
            torch.cuda.synchronize(0)
            torch.cuda.synchronize(1)
            t0 = time.perf_counter()
            for _ in range(reps):
                dst.copy_(src, non_blocking=True)
            torch.cuda.synchronize(0)
            torch.cuda.synchronize(1)
            ms = 1e3 * (time.perf_counter() - t0)
            say(f"BW {name} {mib} MiB {reps * n / (ms / 1e3) / 1e9:.1f} GB/s")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "check":
        check(int(sys.argv[2]))
    elif sys.argv[1:] == ["dataparallel"]:
        dataparallel()
    elif sys.argv[1:] == ["bw"]:
        bw()
    else:
        sys.exit(__doc__)
    say("DONE")
