"""Where a training job's first steps go: one DDP job of the suite's llama-1b, decoder layers compiled one by one
(``compile: blocks``), each step timed on its own (host clock, the GPU synchronised after it).

Run under torchrun, one process per GPU, with a fresh TorchInductor and Triton cache per run
(TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR), e.g. ``benchmarks/compile_start.sh``. Ways, the first argument:
  plain     as the training probe does it
  prewarm   TorchInductor's compile worker pool started and waited for before the model is built
  first     local rank 0 compiles one layer's forward and backward alone first; the others wait, then hit
            the caches it filled
  eager     no compilation (the step time that compilation buys back)
Prints one JSON line per rank: seconds per step, the pool's start, TorchDynamo's compile-time breakdown; then
when the rank destroyed its process group and when its interpreter ran its last exit handler (wall clock, to set
beside torchrun's own exit).
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import time

T0 = time.perf_counter()
# registered first, so it runs last: after TorchInductor's and NCCL's own exit handlers
atexit.register(lambda: print(json.dumps({"rank": os.environ.get("LOCAL_RANK"), "last_handler_at": time.time()})))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import transformers.models.llama.modeling_llama  # noqa: E402, F401
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

from acceptance.probes.train_model import build_model, decoder_layers  # noqa: E402
from acceptance.probes.train_strategies import adamw, compile_blocks  # noqa: E402

SEQ = 2048
MICRO = 8
STEPS = 6


def step(model: torch.nn.Module, opt: torch.optim.Optimizer, tokens: torch.Tensor) -> float:
    start = time.perf_counter()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(input_ids=tokens, labels=tokens).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    return time.perf_counter() - start


def layer_alone(model: torch.nn.Module, device: torch.device) -> None:
    """One compiled layer's forward and backward on its own, the shapes and precision of a step."""
    layer = decoder_layers(model)[0]
    hidden = torch.randn(MICRO, SEQ, model.config.hidden_size, device=device, requires_grad=True)
    rotary = model.model.rotary_emb
    positions = torch.arange(SEQ, device=device).unsqueeze(0)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        cos_sin = rotary(hidden, positions)
        out = layer(hidden, position_embeddings=cos_sin, position_ids=positions)
    (out[0] if isinstance(out, tuple) else out).float().sum().backward()
    torch.cuda.synchronize()


def main() -> None:
    way = sys.argv[1]
    imported = time.perf_counter() - T0
    local = int(os.environ["LOCAL_RANK"])
    figures: dict[str, object] = {"way": way, "rank": local, "import_s": round(imported, 2)}
    if way == "prewarm":
        start = time.perf_counter()
        from torch._inductor.async_compile import AsyncCompile, maybe_warm_pool

        maybe_warm_pool()
        AsyncCompile.wait_pool_ready()
        figures["pool_s"] = round(time.perf_counter() - start, 2)
    torch.cuda.set_device(local)
    device = torch.device("cuda", local)
    start = time.perf_counter()
    dist.init_process_group("nccl", device_id=device)
    figures["init_pg_s"] = round(time.perf_counter() - start, 2)
    model = build_model("llama-1b", SEQ, device, 0)
    if way != "eager":
        compile_blocks(model)
    if way == "first":
        start = time.perf_counter()
        if local == 0:
            layer_alone(model, device)
        dist.barrier()
        figures["first_s"] = round(time.perf_counter() - start, 2)
    wrapped = DDP(model, device_ids=[local], gradient_as_bucket_view=True)
    opt = adamw(model.parameters(), 3e-4, device)
    gen = torch.Generator(device=device).manual_seed(local)
    tokens = torch.randint(0, 1024, (MICRO, SEQ), device=device, generator=gen)
    figures["steps_s"] = [round(step(wrapped, opt, tokens), 3) for _ in range(STEPS)]
    figures["threads"] = torch._inductor.config.compile_threads
    figures["compile"] = torch._dynamo.utils.compile_times(repr="str", aggregate=True)
    figures["wall_s"] = round(time.perf_counter() - T0, 2)
    print(json.dumps(figures), flush=True)
    ended = time.time()
    dist.destroy_process_group()
    print(json.dumps({"rank": local, "ended_at": ended, "destroyed_s": round(time.time() - ended, 3)}), flush=True)


if __name__ == "__main__":
    main()
