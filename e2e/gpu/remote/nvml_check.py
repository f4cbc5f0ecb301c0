"""gpumux's NVML for remote shares, as PyTorch and NVML's users see it
(run.sh nvml). Run with bin/remote on LD_LIBRARY_PATH and a token with
GM_QUOTA bytes of quota; prints what it finds and "nvml_check: ok" when
every check passed, else the failures (exit 1)."""
import ctypes
import os
import sys

import torch

failed = []


def check(what, cond):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failed.append(what)


class Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


nv = ctypes.CDLL("libnvidia-ml.so.1")
check("nvmlInit_v2", nv.nvmlInit_v2() == 0)
count = ctypes.c_uint(0)
check("nvmlDeviceGetCount_v2", nv.nvmlDeviceGetCount_v2(ctypes.byref(count)) == 0)
handle = ctypes.c_void_p()
check("nvmlDeviceGetHandleByIndex_v2", nv.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle)) == 0)
name = ctypes.create_string_buffer(96)
uuid = ctypes.create_string_buffer(96)
check("nvmlDeviceGetName", nv.nvmlDeviceGetName(handle, name, 96) == 0)
check("nvmlDeviceGetUUID", nv.nvmlDeviceGetUUID(handle, uuid, 96) == 0)


def used():
    m = Memory()
    r = nv.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(m))
    return r, m


quota = int(os.environ["GM_QUOTA"])
r, m = used()
print(f"NVML: {count.value} device(s), {name.value.decode()} {uuid.value.decode()}, "
      f"memory total {m.total} used {m.used} free {m.free}")
check("NVML total is the quota", r == 0 and m.total == quota)

print("torch.cuda.device_count()", torch.cuda.device_count())
check("torch and NVML count the same devices", torch.cuda.device_count() == count.value)
props = torch.cuda.get_device_properties(0)
check("torch's device name is NVML's", props.name == name.value.decode())
check("torch's device UUID is NVML's", "GPU-" + str(props.uuid) == uuid.value.decode())
free, total = torch.cuda.mem_get_info(0)
print("torch.cuda.mem_get_info()", free, total)
check("mem_get_info total is the quota", total == quota)

before = used()[1].used
x = torch.empty(1 << 28, dtype=torch.float32, device="cuda")  # 1 GiB
torch.cuda.synchronize()
after = used()[1].used
print(f"NVML used before {before}, after a 1 GiB tensor {after}")
check("NVML used grew by at least 1 GiB", after - before >= 1 << 30)

try:
    print("torch.cuda.device_memory_used()", torch.cuda.device_memory_used())
    check("device_memory_used() is NVML's used", torch.cuda.device_memory_used() == used()[1].used)
    print(torch.cuda.list_gpu_processes())
    check("list_gpu_processes() lists this process",
          f"process {os.getpid():>10d}" in torch.cuda.list_gpu_processes())
    try:
        torch.cuda.utilization()
        check("utilization() is not supported", False)
    except Exception as e:  # pynvml.NVMLError_NotSupported
        print("torch.cuda.utilization():", type(e).__name__, e)
        check("utilization() is not supported", "Not Supported" in str(e))
except ModuleNotFoundError as e:
    print("skipped torch.cuda.device_memory_used/list_gpu_processes/utilization:", e)
del x

if failed:
    print("nvml_check: FAILED:", ", ".join(failed))
    sys.exit(1)
print("nvml_check: ok")
