"""Training's part of init's first profile: the GPU workload the reference table's training rows were
measured with, where it has them for this GPU; MFU's peak from the compute reference; and the bounds of the
strategies and of scaling those rows give."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from acceptance.json_types import JSONObject
from acceptance.schema.initial import Initial, InitialSetup, RowFacts

# The GPU workload the training references were measured with (docs/measurements.md, the Training tables):
# a Llama-style 1.1 B model at sequence 2048 in bf16, each decoder layer compiled. 16,384 tokens per GPU and
# step: micro-batch 8 on a 141 GB H200, 4 x 2 accumulated steps on an 80 GB GPU (as h200-x2 and h100-x1).
GPU_WORKLOAD: JSONObject = {"model": "llama-1b", "seq_len": 2048, "precision": "bf16", "compile": "blocks"}
GPU_STRATEGIES = ["ddp", "fsdp", "zero1", "zero2", "zero3"]
MICRO_BATCH = {"h200": (8, 1)}  # the table's GPU key -> (micro-batch, gradient accumulation)
DEFAULT_MICRO_BATCH = (4, 2)
SCALING = "training.scaling_efficiency"


def trains_reference_workload(setup: InitialSetup) -> bool:
    """Whether the table has training rows for this GPU: then init writes the workload they were measured on."""
    return setup.gpu is not None and any(f.startswith("training.") for f in setup.gpu_figures)


def peak(bounds: Mapping[str, RowFacts | None]) -> JSONObject:
    """MFU's peak for a training section: the compute reference's dense bf16 (and fp16) peak, where the table
    has one for the GPU."""
    found = bounds.get("compute.matmul_tflops_min")
    if found is None:
        return {}
    return {"peak_tflops": {"bf16": found.value, "fp16": found.value}, "peak_tflops_source": found.source}


def section(setup: InitialSetup, bounds: Mapping[str, RowFacts | None]) -> JSONObject:
    out: JSONObject = {}
    if trains_reference_workload(setup):
        micro, accum = MICRO_BATCH.get(setup.gpu or "", DEFAULT_MICRO_BATCH)
        out.update(GPU_WORKLOAD)
        out.update({"micro_batch": micro, "grad_accum": accum, "strategies": list(GPU_STRATEGIES)})
    if setup.world < 2:
        out["scaling_baseline"] = "none"  # one GPU: the full world is the baseline
    out.update(peak(bounds))
    return out


def metrics(figure: str, _holds_at: Callable[[int], bool], setup: InitialSetup) -> list[str]:
    if figure == SCALING:
        # one GPU is its own baseline; over sockets no public figure says what scaling across nodes should be
        # (the > 90% bar is of a published acceptance run over InfiniBand)
        return [figure] if setup.world >= 2 and not setup.sockets else []
    return [figure] if trains_reference_workload(setup) and figure.split(".")[1] in GPU_STRATEGIES else []


def note(_written: JSONObject, bounded: Callable[[str], bool]) -> str:
    scaled = "bounded" if bounded(SCALING) else "recorded, not bounded (its bar is of RDMA clusters)"
    return f"scaling across nodes {scaled}"


INITIAL = Initial(section, 40, metrics, note=note)
