"""The training runs a profile asks for, and the figures computed across them (scaling, numerics canary).

Free of torch and pytest: the acceptance tests and ``acceptance.cli.bench_train`` both plan runs with it.
Every strategy of a run shares one torchrun job (start-up, imports and rendezvous are paid once); the probe
tears each strategy down before the next and records a failure under the strategy's name. A strategy that
kills its job (a crash on some ranks only, a hang until the timeout) takes only itself down: the job's
finished strategies are kept, it is named with the job's error, and the strategies after it run in a new
job. The scaling baseline of a DDP run needs a smaller world: it is a part of the same job, run on a process
group of the baseline's ranks right after the full-world run (the other ranks wait); any other scaling
strategy gets a job of its own.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator
from typing_extensions import TypedDict

from acceptance.families.training.initial import INITIAL
from acceptance.families.training.noise import noise
from acceptance.families.training.report import REPORT
from acceptance.json_types import JSONObject
from acceptance.schema.bounds import Threshold
from acceptance.schema.family import GPU_ONLY, Behaviour, Device, Family, LoadedProfile, Metric, S, Shapes
from acceptance.schema.fields import PositiveInt, RunName, Strict
from acceptance.schema.peaks import Peaks, Precision
from acceptance.schema.toolchain import Need

TRAIN_STRATEGIES = ("ddp", "fsdp", "zero1", "zero2", "zero3", "zero3_offload")
DEEPSPEED_STRATEGIES = ("zero1", "zero2", "zero3", "zero3_offload")
TRAIN_MODELS = ("tiny", "gpt2-124m", "gpt2-355m", "llama-1b")  # shapes in acceptance/probes/train_model.py


class DeepSpeedRun(Strict):
    """A DeepSpeed run under its own name: a built-in stage with a user's DeepSpeed JSON merged on top."""

    base: Literal[DEEPSPEED_STRATEGIES]  # type: ignore[valid-type]
    config: dict[str, Any] | str  # the JSON itself, or a file (relative to the profile's folder)


class Training(Strict):
    """Short real training runs, all strategies in one torchrun job; ``steps`` timed after ``warmup_steps``."""

    model: Literal[TRAIN_MODELS] = "gpt2-124m"  # type: ignore[valid-type]
    seq_len: PositiveInt = 1024
    micro_batch: PositiveInt = 16
    grad_accum: PositiveInt = 1
    warmup_steps: Annotated[int, Field(ge=0)] = 5
    steps: PositiveInt = 20
    windows: PositiveInt | None = None  # of the timed steps: tokens/s is their median; None: 5 (at most steps)
    precision: Precision = "bf16"
    compile: Literal["none", "blocks", "model"] = "none"  # blocks: each decoder layer, a short cold start
    lr: Annotated[float, Field(ge=0)] = 3e-4  # constant: the same for every strategy, so curves compare
    grad_clip: Annotated[float, Field(ge=0)] = 1.0  # 0: off
    seed: int = 1234
    strategies: list[RunName] = ["ddp", "fsdp", "zero2", "zero3"]
    deepspeed: dict[RunName, DeepSpeedRun] = {}
    peak_tflops: Peaks = None  # per GPU, dense, per precision (1 TFLOP/s = 1e12); MFU takes ``precision``'s
    peak_tflops_source: str | None = None
    scaling_baseline: Literal["one_gpu", "one_node", "none"] = "one_gpu"
    scaling_strategy: RunName = "ddp"
    canary_steps: PositiveInt = 5
    canary_rtol: Annotated[float, Field(ge=0)] = 0.02
    # after the timed steps, this many more under torch.profiler: a trace per rank, none of the figures
    trace_steps: Annotated[int, Field(ge=0)] = 0

    @model_validator(mode="after")
    def _consistent(self) -> Training:
        known = set(TRAIN_STRATEGIES) | set(self.deepspeed)
        unknown = [s for s in self.strategies if s not in known]
        if unknown:
            raise ValueError(
                f"strategies {unknown} are neither built in {list(TRAIN_STRATEGIES)} nor named under deepspeed:"
            )
        if not self.strategies or len(set(self.strategies)) != len(self.strategies):
            raise ValueError("strategies must list at least one strategy, each once")
        if (self.peak_tflops is None) != (self.peak_tflops_source is None):
            raise ValueError("peak_tflops and peak_tflops_source go together (say where the peak comes from)")
        if self.scaling_baseline != "none" and self.scaling_strategy not in self.strategies:
            raise ValueError(f"scaling_strategy {self.scaling_strategy!r} is not in strategies {self.strategies}")
        if self.windows is not None and self.windows > self.steps:
            raise ValueError(f"windows ({self.windows}) exceeds steps ({self.steps}): every timed window needs a step")
        if self.canary_steps > self.warmup_steps + self.steps:
            raise ValueError("canary_steps exceeds warmup_steps + steps: the runs would not have that many losses")
        return self


_TRAIN = "training.<strategy>.<figure>"


def loss_must_fall(_section: object) -> Threshold:
    """``Metric.builtin`` of a workload's ``loss_ratio`` (last loss over first): it must fall, whatever the
    section says."""
    return Threshold(max=0.99, source="built-in: the loss must fall by at least 1% over the run")


def workload_figures(shapes: Shapes[S]) -> tuple[Metric[S], ...]:
    """The figures every strategy of a training workload gives, the training family's and the reference
    workload's alike (``acceptance.families.llama8b``): its speed, its step times and memory, and its loss."""
    return (
        shapes.figure(r"(?P<strategy>\w+)\.(tokens_per_s_per_gpu)", "higher"),
        # a GPU's peak FLOP/s: none on the CPU
        shapes.figure(r"(?P<strategy>\w+)\.(mfu)", "higher", devices=GPU_ONLY),
        shapes.figure(r"(?P<strategy>\w+)\.(step_time_s|step_time_std_s|peak_mem_gib)", "lower"),
        shapes.figure(r"(?P<strategy>\w+)\.(loss_ratio)", "lower", kind="correctness", builtin=loss_must_fall),
    )


def _canary_rtol(s: Training) -> Threshold:
    return Threshold(max=s.canary_rtol, source="training.canary_rtol")


def _strategies(s: Training) -> Sequence[str]:
    return s.strategies


# triton/runtime/build.py: $CC, else gcc, else clang ("Failed to find C compiler")
TRITON = Need("training", "torch.compile ({setting}) builds Triton's launchers", "CC", ("gcc", "clang"),
              "triton/runtime/build.py")  # fmt: skip
# torch/_inductor/config.py cpp.cxx: $CXX, else g++ (Inductor's C++ kernels on the CPU)
INDUCTOR_CPU = Need("training", "torch.compile ({setting}) builds Inductor's C++ kernels", "CXX", ("g++",),
                    "torch/_inductor/config.py")  # fmt: skip
# deepspeed/comm/torch.py build_shm_op, through torch/utils/cpp_extension.py: $CXX, else c++
DEEPSPEED_CPU = Need("training", "DeepSpeed's CPU communication op ({setting}) is built", "CXX", ("c++",),
                     "deepspeed/comm/torch.py")  # fmt: skip


def _builds_with(s: Training, device: Device) -> list[tuple[Need, str]]:
    """torch.compile's compiler where the section compiles; DeepSpeed's CPU op where a strategy of it runs on
    the CPU."""
    found: list[tuple[Need, str]] = []
    cuda = device == "cuda"
    if s.compile != "none":
        found.append((TRITON if cuda else INDUCTOR_CPU, f"training.compile: {s.compile}"))
    deepspeed = [name for name in s.strategies if name in DEEPSPEED_STRATEGIES or name in s.deepspeed]
    if deepspeed and not cuda:
        found.append((DEEPSPEED_CPU, f"training: {', '.join(deepspeed)}"))
    return found


_STRATEGY = Shapes[Training](_TRAIN, {"strategy": _strategies})
TRAINING = Family(
    "training",
    "short real training runs: DDP, FSDP, DeepSpeed ZeRO",
    Training,
    (
        *workload_figures(_STRATEGY),
        # a GPU's NVML utilisation: none on the CPU
        _STRATEGY.figure(r"(?P<strategy>\w+)\.(gpu_util_pct)", "higher", devices=GPU_ONLY),
        _STRATEGY.figure(r"(?P<strategy>\w+)\.(loss_last)", "lower"),
        _STRATEGY.figure(r"(?P<strategy>\w+)\.(wall_s)", "lower", scale="bound"),
        _STRATEGY.figure(r"(?P<strategy>\w+)\.(loss_first)", "none"),
        Metric[Training](r"scaling_efficiency", "training.scaling_efficiency", "higher"),
        _STRATEGY.figure(
            r"canary\.(?P<strategy>\w+)\.max_rel_diff", "lower", doc="training.canary.<strategy>.max_rel_diff",
            scale="bound", kind="correctness", builtin=_canary_rtol,
        ),
    ),
    probes=("training",),
    staged=True,
    behaviour=Behaviour(noise=noise, builds_with=_builds_with, report=REPORT, initial=INITIAL),
)  # fmt: skip


PROBE = "training"


class TrainingPlanError(ValueError):
    """A training section that names something unusable (a DeepSpeed JSON that cannot be read)."""


BASELINE_KEY = f"{PROBE}-baseline"
# the scaling baseline as a part of the strategies' job: not a run name (those never hold "-")
BASELINE_PART = "scaling-baseline"
# the strategies whose runner takes a process group smaller than the world (DDP's ``process_group``)
IN_JOB_BASELINE = ("ddp",)


# One part's result: its figures (figures.TrainingFigures) merged with what its strategy set up
# (compile mode, DeepSpeed's config...), the job's facts and ``job``; or ``error`` with the strategy's name
StrategyResult = dict[str, object]


class TrainingResult(TypedDict):
    strategies: dict[str, StrategyResult]


class BaselineSpec(TypedDict):
    """The scaling baseline's part of a training job: which strategy, on how many ranks of each node."""

    strategy: str
    ranks_per_node: int


class Canary(TypedDict):
    max_rel_diff: float
    worst_step: int
    within: bool
    rtol: float
    rel_diff: list[float]


def job_key(attempt: int, probe: str = PROBE) -> str:
    """The first job is ``training`` (``probe``); the next ones (the strategies after one that killed its
    job) ``training-2``, ``training-3``, ..."""
    return probe if attempt == 0 else f"{probe}-{attempt + 1}"


def user_config(profile: LoadedProfile, strategy: str) -> JSONObject | None:
    """The user's DeepSpeed JSON for ``strategy``: inline, or read from a file beside the profile."""
    run = TRAINING.section_of(profile.model).deepspeed.get(strategy)
    if run is None:
        return None
    if isinstance(run.config, dict):
        return dict(run.config)
    path = Path(run.config)
    if not path.is_absolute():
        path = profile.path.parent / path
    where = f"{profile.path}: training.deepspeed.{strategy}.config"
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise TrainingPlanError(f"{where}: cannot read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise TrainingPlanError(f"{where}: {path} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise TrainingPlanError(f"{where}: {path} must hold a JSON object, got {type(data).__name__}")
    found: JSONObject = data
    return found


def spec(
    profile: LoadedProfile,
    parts: list[str],
    world_size: int,
    ranks_per_node: int,
    nodes: int,
    base: Baseline | None = None,
) -> JSONObject:
    """The probe's spec for one job of ``parts`` (strategies, and ``BASELINE_PART`` run on ``base``); raises
    TrainingPlanError for a strategy whose DeepSpeed JSON is unusable."""
    strategies = [p for p in parts if p != BASELINE_PART]
    found: JSONObject = {
        PROBE: profile.resolved[PROBE],
        "strategies": list(parts),
        "deepspeed_user": {s: user_config(profile, s) for s in strategies},
        "expected_world_size": world_size,
        "ranks_per_node": ranks_per_node,
        "nodes": nodes,
    }
    if BASELINE_PART in parts and base is not None:
        found["baseline"] = {
            "strategy": TRAINING.section_of(profile.model).scaling_strategy,
            "ranks_per_node": base.ranks_per_node,
        }
    return found


# (strategies, job key) -> (the job's per-strategy results, or what the job died of with the results it
# finished before that): the caller launches the job, this module decides what to run and who failed
Launch = Callable[[list[str], str], tuple[dict[str, StrategyResult], str | None]]


# A ZeRO-3 run is the one that has left something behind: DeepSpeed 0.19 kept its engine alive through a
# class-level cache (see train_strategies.close_deepspeed, which now clears it), and on 2x H200 each ZeRO-3 run
# of llama-1b left 8.5 GiB allocated per GPU (held_after_teardown_gib in the evidence). ZeRO-1/2, DDP and
# FSDP leave nothing behind, so the ZeRO-3 runs go last: what one still leaves can only touch another.
# A further ZeRO-3 run once had a job of its own; four fresh jobs of zero3_tuned alone read 38,925-52,684
# tokens/s/GPU (docs/measurements.md, findings), so one job with both saves a job's start.
ZERO3 = ("zero3", "zero3_offload")


def job_groups(training: Training, strategies: list[str]) -> list[list[str]]:
    """The jobs the strategies run in: one for all of them, the ZeRO-3 runs last."""

    def stage3(name: str) -> bool:
        run = training.deepspeed.get(name)
        return (run.base if run is not None else name) in ZERO3

    ordered = [s for s in strategies if not stage3(s)] + [s for s in strategies if stage3(s)]
    return [ordered] if ordered else []


def run_jobs(groups: list[list[str]], launch: Launch, probe: str = PROBE) -> dict[str, StrategyResult]:
    """Every strategy's result (its figures, or ``{"error": ...}``), one job per group of strategies and
    as few more as the failures need.

    A job that dies is blamed on the first strategy it had not finished (the one it was in); the strategies
    after that one run in the next job. At most one job per strategy, whatever fails. ``probe``: the probe
    the jobs run, which names their keys (``job_key``).
    """
    results: dict[str, StrategyResult] = {}
    attempt = 0
    for group in groups:
        pending = list(group)
        while pending:
            key = job_key(attempt, probe)
            done, died = launch(pending, key)
            results.update({s: done[s] for s in pending if s in done})
            rest = [s for s in pending if s not in done]
            if died is None and rest:
                died = f"the training job ended without a result for {', '.join(rest)}"
            if rest:
                results[rest[0]] = {"error": died, "strategy": rest[0], "job": key}
            pending, attempt = rest[1:], attempt + 1
    return results


@dataclass(frozen=True)
class Baseline:
    ranks_per_node: int
    nodes: int
    label: str

    @property
    def world_size(self) -> int:
        return self.ranks_per_node * self.nodes


def baseline(training: Training, ranks_per_node: int, nodes: int) -> Baseline | str:
    """The smaller world the scaling efficiency is measured against, or why there is none."""
    if training.scaling_baseline == "none":
        return "the profile sets training.scaling_baseline: none"
    if training.scaling_baseline == "one_gpu":
        base = Baseline(1, 1, "one GPU (one rank)")
    else:
        base = Baseline(ranks_per_node, 1, f"one node ({ranks_per_node} ranks)")
    if base.world_size >= ranks_per_node * nodes:
        return f"the full world ({nodes} node(s) x {ranks_per_node}) is no larger than the baseline, {base.label}"
    return base


def with_baseline(training: Training, strategies: list[str], base: Baseline | str | None) -> list[str]:
    """The job's parts: ``strategies``, and the baseline right after its strategy where it can share the job."""
    strategy = training.scaling_strategy
    if not isinstance(base, Baseline) or strategy not in strategies or strategy not in IN_JOB_BASELINE:
        return list(strategies)
    at = strategies.index(strategy) + 1
    return [*strategies[:at], BASELINE_PART, *strategies[at:]]


def node_baseline(part: StrategyResult, node_rank: int) -> StrategyResult:
    """This node's baseline figures out of the job's baseline part (each node measured its own), or the
    part's error."""
    if part.get("error"):
        return part
    by_node = part.get("by_node") or {}
    found = by_node.get(str(node_rank)) if isinstance(by_node, dict) else None
    return found if isinstance(found, dict) else {"error": f"the baseline part has no figures for node {node_rank}"}


def scaling_efficiency(full: Mapping[str, object], base: Mapping[str, object]) -> float:
    """Per-GPU throughput at the full world over per-GPU throughput on the baseline (weak scaling)."""
    return _number(full["tokens_per_s_per_gpu"]) / _number(base["tokens_per_s_per_gpu"])


def _number(value: object) -> float:
    """A figure of a run's JSON as a float; anything else raises, as ``float`` of it did."""
    if isinstance(value, (int, float, str)):
        return float(value)
    raise TypeError(f"not a number: {value!r}")


def canary(reference: list[float], other: list[float], steps: int, rtol: float) -> Canary:
    """Compare two per-step loss curves over their first ``steps`` steps: the largest relative difference."""
    if len(reference) < steps or len(other) < steps:
        raise ValueError(f"the canary compares {steps} steps; the curves have {len(reference)} and {len(other)}")
    diffs = [abs(b - a) / abs(a) if a else abs(b - a) for a, b in zip(reference[:steps], other[:steps], strict=True)]
    worst = max(range(steps), key=diffs.__getitem__)
    return {
        "max_rel_diff": diffs[worst],
        "worst_step": worst,
        "within": diffs[worst] <= rtol,
        "rtol": rtol,
        "rel_diff": diffs,
    }


def curves_text(reference_name: str, reference: list[float], name: str, other: list[float], steps: int) -> str:
    rows = [f"step {i}: {reference_name} {reference[i]:.6f}  {name} {other[i]:.6f}" for i in range(steps)]
    return "\n".join(rows)
