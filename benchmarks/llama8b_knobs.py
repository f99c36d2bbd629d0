"""What moves the reference workload's MFU on one GPU: gradient accumulation (the optimizer step's share of a
step) and the attention kernel, through the suite's own model, FSDP2 wrapping and step.

One process per case (a compiled layer's graph keeps the attention kernel it was traced with):

    python benchmarks/llama8b_knobs.py --layers 8 --grad-accum 16 --attention cudnn --steps 3

prints one line: the case, tokens/s, MFU (the family's formula: 6N + 12·L·H·Q·T over the run precision's dense
peak, ``--peak``, default the H100 SXM's 989.4 TFLOP/s bf16, NVIDIA H100 datasheet) and peak GiB.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from acceptance.families.training import Training
from acceptance.probes.train_model import build_model, describe
from acceptance.probes.train_strategies import fsdp

ATTENTION = {
    "default": None,
    "cudnn": "CUDNN_ATTENTION",
    "flash": "FLASH_ATTENTION",
    "efficient": "EFFICIENT_ATTENTION",
}


@dataclass
class _Ctx:
    """What the strategy reads of a rank's context: its device and the world's size."""

    device: torch.device
    world_size: int = 1
    within: Any = None

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"


def _attention(name: str) -> contextlib.AbstractContextManager[Any]:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = ATTENTION[name]
    return contextlib.nullcontext() if backend is None else sdpa_kernel([getattr(SDPBackend, backend)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--seq", type=int, default=8192)
    parser.add_argument("--grad-accum", type=int, default=1)
    parser.add_argument("--attention", choices=sorted(ATTENTION), default="default")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--sync", choices=("last", "every"), default="last", help="reduce the last micro-batch or each")
    parser.add_argument("--peak", type=float, default=989.4, help="dense TFLOP/s of the precision (bf16)")
    args = parser.parse_args()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=device)
    t: Any = Training().model_dump(mode="json")
    t.update({"model": "llama-3.1-8b", "seq_len": args.seq, "grad_accum": args.grad_accum, "compile": "blocks"})
    t["sync_every_micro_batch"] = args.sync == "every"
    model = build_model("llama-3.1-8b", args.seq, device, seed=0, layers=args.layers)
    shape = describe(model, args.seq)
    runner = fsdp(model, t, _Ctx(device))  # type: ignore[arg-type]
    vocab = int(shape["vocab_size"])
    micro = [torch.randint(0, vocab, (1, args.seq), device=device) for _ in range(args.grad_accum)]
    with _attention(args.attention):
        for _ in range(args.warmup):
            runner.step(micro)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        for _ in range(args.steps):
            loss = runner.step(micro)
        torch.cuda.synchronize()
        elapsed = time.perf_counter() - start
    tokens = args.steps * args.grad_accum * args.seq / elapsed
    mfu = tokens * shape["flops_per_token"] / (args.peak * 1e12)
    print(
        f"layers={args.layers} grad_accum={args.grad_accum} attention={args.attention} sync={args.sync}: "
        f"{tokens:,.0f} tokens/s, MFU {mfu:.1%}, {elapsed / args.steps:.3f} s a step, "
        f"peak {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB, loss {float(loss):.3f}",
        flush=True,
    )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
