"""The remote conformance corpus: PyTorch programs as people run them.

Usage: python3 corpus.py <program> | list

Each program seeds everything, asks for deterministic algorithms, trains or
serves a few steps, and prints what it computed as exact values (losses and
checksums as float.hex), so that runs on a local GPU and through
gpumux-remoted can be compared line by line (run.sh corpus). It also prints
"STEP_MS <median>" (the median wall time of a step after the first ones):
that line is a timing, left out of the comparison.
"""
import os
import statistics
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


def out(name, t):
    """Prints a tensor's sum and the sum of its squares, exactly."""
    t = t.detach().float()
    print(f"{name} {t.sum().item().hex()} {(t * t).sum().item().hex()}")


def timed(steps, step, warm=3):
    """Runs step(i) steps times; prints the median time of the later ones."""
    times = []
    for i in range(steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        step(i)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    print(f"STEP_MS {1000 * statistics.median(times[warm:]):.3f}")


def train(model, opt, batch, steps, loss_fn=F.cross_entropy, autocast=None):
    x, y = batch

    def step(i):
        opt.zero_grad(set_to_none=True)
        if autocast is not None:
            with torch.autocast("cuda", dtype=autocast):
                loss = loss_fn(model(x), y)
        else:
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        if i % 5 == 0 or i == steps - 1:
            print(f"STEP {i} LOSS {loss.item().hex()}")

    timed(steps, step)
    for n, p in model.named_parameters():
        out("PARAM " + n, p)


def mlp():
    """Linear, GELU, LayerNorm, AdamW, cross-entropy."""
    model = nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.LayerNorm(1024), nn.Linear(1024, 10)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batch = (torch.randn(128, 256, device=dev), torch.randint(0, 10, (128,), device=dev))
    train(model, opt, batch, 20)


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 16, 3, padding=1)
        self.b1 = nn.BatchNorm2d(16)
        self.c2 = nn.Conv2d(16, 32, 3, padding=1, stride=2)
        self.b2 = nn.BatchNorm2d(32)
        self.attn = nn.MultiheadAttention(32, 4, batch_first=True)
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        x = F.relu(self.b1(self.c1(x)))
        x = F.max_pool2d(F.relu(self.b2(self.c2(x))), 2)
        s = x.flatten(2).transpose(1, 2)
        s, _ = self.attn(s, s, s)
        return self.fc(s.mean(1))


def convnet():
    """Conv2d, BatchNorm2d, MultiheadAttention, SGD with momentum (cuDNN)."""
    model = ConvNet().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    batch = (torch.randn(32, 3, 32, 32, device=dev), torch.randint(0, 10, (32,), device=dev))
    train(model, opt, batch, 15)
    out("RUNNING_MEAN", model.b1.running_mean)


class Block(nn.Module):
    def __init__(self, d=256, h=8):
        super().__init__()
        self.enc = nn.TransformerEncoderLayer(d, h, 4 * d, dropout=0.0, batch_first=True, norm_first=True)
        self.emb = nn.Embedding(1000, d)
        self.head = nn.Linear(d, 1000)

    def forward(self, x):
        return self.head(self.enc(self.emb(x)))


def lm_loss(logits, y):
    return F.cross_entropy(logits.flatten(0, 1), y.flatten())


def transformer():
    """A transformer block (attention, LayerNorm, GELU-free MLP), AdamW."""
    model = Block().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    x = torch.randint(0, 1000, (8, 64), device=dev)
    train(model, opt, (x, torch.roll(x, -1, 1)), 15, loss_fn=lm_loss)


def bf16():
    """The transformer block under bf16 autocast."""
    model = Block().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    x = torch.randint(0, 1000, (8, 64), device=dev)
    train(model, opt, (x, torch.roll(x, -1, 1)), 15, loss_fn=lm_loss, autocast=torch.bfloat16)


def compiled():
    """torch.compile (Inductor, Triton kernels) of an MLP, trained."""
    model = nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.LayerNorm(512), nn.Linear(512, 10)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batch = (torch.randn(64, 256, device=dev), torch.randint(0, 10, (64,), device=dev))
    cmodel = torch.compile(model)
    train(cmodel, opt, batch, 10)


def graphs():
    """Inference captured in a CUDA graph and replayed (the serving path)."""
    model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 256)).to(dev).eval()
    static_in = torch.randn(32, 256, device=dev)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s), torch.no_grad():
        for _ in range(3):
            model(static_in)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(g):
        static_out = model(static_in)
    gen = torch.Generator(device="cpu").manual_seed(1)

    def step(i):
        static_in.copy_(torch.randn(32, 256, generator=gen))
        g.replay()
        if i % 5 == 0:
            out(f"REPLAY {i}", static_out)

    timed(15, step)
    with torch.no_grad():
        out("EAGER", model(static_in))
    out("GRAPH", static_out)


def reduce_overhead():
    """torch.compile(mode="reduce-overhead"): Inductor with CUDA graphs, inference."""
    model = nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.Linear(512, 256)).to(dev).eval()
    cmodel = torch.compile(model, mode="reduce-overhead")
    gen = torch.Generator(device="cpu").manual_seed(1)

    def step(i):
        with torch.no_grad():
            y = cmodel(torch.randn(16, 256, generator=gen).to(dev))
        if i % 5 == 0:
            out(f"INFER {i}", y)

    timed(12, step, warm=4)


class Squares(torch.utils.data.Dataset):
    def __len__(self):
        return 512

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        x = torch.randn(64, generator=g)
        return x, int(x.sum() > 0)


def dataloader():
    """A DataLoader with worker processes and pinned memory, non-blocking copies."""
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 2)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    dl = torch.utils.data.DataLoader(Squares(), batch_size=64, num_workers=2, pin_memory=True)
    times = []
    for epoch in range(2):
        for i, (x, y) in enumerate(dl):
            t0 = time.perf_counter()
            assert x.is_pinned(), "the DataLoader did not pin the batch"
            x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        print(f"EPOCH {epoch} LOSS {loss.item().hex()}")
    print(f"STEP_MS {1000 * statistics.median(times[3:]):.3f}")
    for n, p in model.named_parameters():
        out("PARAM " + n, p)


def pinned():
    """Page-locked host memory: pin_memory, non-blocking copies both ways, events."""
    a = torch.arange(1 << 20, dtype=torch.float32).pin_memory()
    b = a.to(dev, non_blocking=True)
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    c = (b * 2).to("cpu", non_blocking=True)
    e1.record()
    e1.synchronize()
    print(f"ELAPSED_NONNEGATIVE {e0.elapsed_time(e1) >= 0}")
    out("BACK", c)
    free, total = torch.cuda.mem_get_info()
    print(f"MEM_INFO_SANE {0 < free <= total}")


PROGRAMS = {
    "mlp": mlp,
    "convnet": convnet,
    "transformer": transformer,
    "bf16": bf16,
    "compile": compiled,
    "graphs": graphs,
    "reduce-overhead": reduce_overhead,
    "dataloader": dataloader,
    "pinned": pinned,
}

if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in PROGRAMS and sys.argv[1] != "list":
        sys.exit(__doc__)
    if sys.argv[1] == "list":
        print(" ".join(PROGRAMS))
        sys.exit(0)
    PROGRAMS[sys.argv[1]]()
    torch.cuda.synchronize()
    print("DONE")
