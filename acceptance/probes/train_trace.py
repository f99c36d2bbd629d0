"""A few more steps of a strategy under torch.profiler, after its timed steps (``training.trace_steps``), so
that a figure that moves from run to run can be explained from what the host and the GPU did, and none of
the figures pays the profiler's overhead.

Per rank and part: ``trace-<part>-rank<r>.json.gz`` (Chrome trace format: chrome://tracing, Perfetto) and
``trace-<part>-rank<r>.txt`` (``key_averages`` by self CPU time). The result names the files and sums the
host's time blocked in CUDA synchronisation calls: a host that waits there is what keeps the GPU's next
kernels from being launched.
"""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from acceptance.families.training.figures import Trace
from acceptance.probes.rank import Ctx
from acceptance.probes.train_strategies import Runner

# CUDA runtime calls that block the calling host thread until the GPU has caught up (CUDA Runtime API)
SYNC_CALLS = ("cudaStreamSynchronize", "cudaEventSynchronize", "cudaDeviceSynchronize")


def traced_steps(runner: Runner, batches: list[list[torch.Tensor]], ctx: Ctx, part: str, steps: int) -> Trace:
    """Run ``steps`` steps under the profiler; what was written and the host's blocked time per step."""
    ctx.phase(f"{part}: traced steps")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if ctx.is_cuda else [])
    chosen = [batches[i % len(batches)] for i in range(steps)]
    with profile(activities=activities) as prof:
        for micro in chosen:
            ctx.progress()
            runner.step(micro)
        ctx.sync()
    stem = ctx.out / f"trace-{part}-rank{ctx.rank}"
    raw = stem.with_suffix(".json")
    prof.export_chrome_trace(str(raw))
    with raw.open("rb") as src, gzip.open(f"{raw}.gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    raw.unlink()
    averages = prof.key_averages()
    stem.with_suffix(".txt").write_text(averages.table(sort_by="self_cpu_time_total", row_limit=30))
    blocked = {e.key: e.self_cpu_time_total / 1e6 / steps for e in averages if e.key in SYNC_CALLS}
    return {
        "steps": steps,
        "files": [Path(f"{raw}.gz").name, stem.with_suffix(".txt").name],
        "host_blocked_s_per_step": blocked,
        "host_blocked_calls_per_step": {e.key: e.count / steps for e in averages if e.key in SYNC_CALLS},
    }
