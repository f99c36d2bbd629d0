"""A bf16 matmul loop on one GPU for SECONDS: another process that slows the GPU the soak runs on.

CUDA_VISIBLE_DEVICES=0 python3 benchmarks/matmul_loop.py SECONDS
"""

import sys
import time

import torch

seconds = float(sys.argv[1])
a = torch.randn((8192, 8192), device="cuda", dtype=torch.bfloat16)
b = torch.randn((8192, 8192), device="cuda", dtype=torch.bfloat16)
print(f"matmul loop on {torch.cuda.get_device_name()} for {seconds:g} s", flush=True)
end, calls = time.time() + seconds, 0
while time.time() < end:
    for _ in range(20):
        torch.mm(a, b)
    torch.cuda.synchronize()
    calls += 20
print(f"matmul loop: {calls} calls", flush=True)
