"""The training runs a profile asks for, and the figures computed across them (scaling, numerics canary).

Free of torch and pytest: the acceptance tests and ``acceptance.cli.bench_train`` both plan runs with it.
One torchrun job per strategy, so a strategy that crashes or hangs takes only its own figures down, and
each job's peak memory is its own; the scaling baseline is one more job on a smaller world.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from acceptance.profile.loader import Profile
from acceptance.profile.model import Training

PROBE = "training"


class TrainingPlanError(ValueError):
    """A training section that names something unusable (a DeepSpeed JSON that cannot be read)."""


def key(strategy: str) -> str:
    return f"{PROBE}-{strategy}"


def user_config(profile: Profile, strategy: str) -> dict[str, Any] | None:
    """The user's DeepSpeed JSON for ``strategy``: inline, or read from a file beside the profile."""
    run = profile.model.training.deepspeed.get(strategy)
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
    return data


def spec(profile: Profile, strategy: str, world_size: int, ranks_per_node: int, nodes: int) -> dict[str, Any]:
    return {
        PROBE: profile.resolved[PROBE],
        "strategy": strategy,
        "deepspeed_user": user_config(profile, strategy),
        "expected_world_size": world_size,
        "ranks_per_node": ranks_per_node,
        "nodes": nodes,
    }


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


def scaling_efficiency(full: dict[str, Any], base: dict[str, Any]) -> float:
    """Per-GPU throughput at the full world over per-GPU throughput on the baseline (weak scaling)."""
    return float(full["tokens_per_s_per_gpu"]) / float(base["tokens_per_s_per_gpu"])


def canary(reference: list[float], other: list[float], steps: int, rtol: float) -> dict[str, Any]:
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
