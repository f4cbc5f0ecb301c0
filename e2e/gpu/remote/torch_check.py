"""A small PyTorch program for run.sh torch: run locally and through
gpumux-remoted, its outputs are diffed. Every step prints one line, a
failed one its exception, so the output shows how far torch gets."""
import torch


def step(name, f):
    try:
        v = f()
    except Exception as e:  # noqa: BLE001 - the point is to report it
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        print(f"{name}: FAILED {type(e).__name__}: {first}", flush=True)
        return False
    print(f"{name}: {v}", flush=True)
    return True


def matmul():
    torch.manual_seed(0)
    a = torch.randn(1024, 1024, device="cuda")
    b = torch.randn(1024, 1024, device="cuda")
    c = (a @ b).cpu()
    ref = a.cpu() @ b.cpu()
    return "allclose to CPU %s, sum %.3f" % (torch.allclose(c, ref, rtol=1e-3, atol=1e-3), c.double().sum().item())


step("is_available", torch.cuda.is_available)
step("device_count", torch.cuda.device_count)
step("init", lambda: (torch.cuda.init(), torch.cuda.get_device_name(0))[1])
step("ones*2 sum", lambda: (torch.ones(1024, device="cuda") * 2).sum().item())
step("to cuda and back", lambda: torch.arange(10, dtype=torch.float32).cuda().mul(3).cpu().tolist())
step("matmul 1024", matmul)
step("synchronize", torch.cuda.synchronize)
