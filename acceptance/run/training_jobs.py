"""The training family's jobs on a ClusterRun: the strategies of the run in one torchrun job (the ZeRO-3 runs
run last), with the scaling baseline where it can share the job, else in a job of its own.

What to run and whom to blame is decided by ``acceptance.families.training.run_jobs``; this module launches
the jobs it asks for and reads back what each finished, also from a job that failed. The acceptance tests
and ``acceptance.cli.bench_train`` both go through it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from acceptance.families import llama8b
from acceptance.families import training as plan
from acceptance.families.llama8b import LLAMA8B
from acceptance.families.training import TRAINING
from acceptance.json_types import JSONObject
from acceptance.run.cluster_run import ClusterRun
from acceptance.run.launcher import ProbeError
from acceptance.schema.results import validated

Baseline = plan.Baseline
FIRST_KEY = plan.job_key(0)  # the first job's key: the one started ahead of its turn (``stage_first``)


@dataclass(frozen=True)
class Selected:
    """A selected test as the training job's plan reads it: its module's stem, its name, its parameters."""

    module: str
    name: str
    params: Mapping[str, object]


def strategies_needed(cluster: ClusterRun, selected: list[Selected]) -> list[str]:
    """The strategies the selected tests of the training module read, in the profile's order."""
    training = TRAINING.section_of(cluster.profile.model)
    wanted: set[str] = set()
    for test in selected:
        if test.module != TRAINING.module:
            continue
        wanted |= {str(v) for k, v in test.params.items() if k in ("train_strategy", "canary_strategy")}
        if "canary_strategy" in test.params:
            wanted.add(training.strategies[0])  # the reference curve
        if test.name == "test_scaling_efficiency" and training.scaling_baseline != "none":
            wanted.add(training.scaling_strategy)
    return [s for s in training.strategies if s in wanted]


def baseline_needed(cluster: ClusterRun, selected: list[Selected]) -> plan.Baseline | str | None:
    """The scaling baseline when its test is selected (it may share the strategies' job)."""
    if not any(test.module == TRAINING.module and test.name == "test_scaling_efficiency" for test in selected):
        return None
    training = TRAINING.section_of(cluster.profile.model)
    return plan.baseline(training, cluster.topology.nproc_per_node, cluster.placement.nodes)


def strategy_runs(
    cluster: ClusterRun, strategies: list[str], base: plan.Baseline | str | None = None
) -> dict[str, plan.StrategyResult]:
    """Each strategy's result (its figures, or ``{"error": ...}``), with ``job``: the probe key it ran in;
    with ``base``, also the baseline's under ``plan.BASELINE_PART`` where it shares the job (see
    ``plan.with_baseline``; else ``baseline_run`` runs it apart).

    Call it once per run: the jobs' keys (``training``, ``training-2``, ...) are the run's."""
    strategies = plan.with_baseline(TRAINING.section_of(cluster.profile.model), strategies, base)
    results = _unusable(cluster, strategies)
    usable = [s for s in strategies if s not in results]

    def spec(pending: list[str]) -> JSONObject:
        return _spec(cluster, pending, base)

    groups = plan.job_groups(TRAINING.section_of(cluster.profile.model), usable)
    for strategy, result in plan.run_jobs(groups, _launcher(cluster, plan.PROBE, spec, staged=True)).items():
        results[strategy] = {"job": None, **result}
    return {s: results[s] for s in strategies}


def _launcher(
    cluster: ClusterRun, probe: str, spec: Callable[[list[str]], JSONObject], staged: bool = False
) -> plan.Launch:
    """What ``plan.run_jobs`` launches a job of strategies with: ``probe`` on ``spec(strategies)``, its
    result, or the parts its ranks finished with what the job died of. ``staged``: the job may have been
    started ahead of its turn (``stage_first``), which ``ClusterRun.stage`` here does otherwise."""

    def launch(pending: list[str], key: str) -> tuple[dict[str, plan.StrategyResult], str | None]:
        found_spec = spec(pending)
        if staged:
            cluster.stage(probe, found_spec, key, parts=len(pending))  # unless it was, ahead of its turn
        try:
            done = validated(probe, plan.TrainingResult, cluster.probe(probe, found_spec, key=key, parts=len(pending)))
            found, error = done.get("strategies", {}), None
        except ProbeError as exc:  # the parts its ranks finished before it failed
            found, error = cast(dict[str, plan.StrategyResult], cluster.partial(key).get("parts", {})), str(exc)
        return {s: {**r, "job": key} for s, r in found.items()}, error

    return launch


def reference_runs(cluster: ClusterRun) -> dict[str, plan.StrategyResult]:
    """The reference workload's strategies (``acceptance.families.llama8b``), each result as
    ``strategy_runs`` gives one: one job for all of them, ZeRO-3 last, the strategies after one that killed
    its job in the next (keys ``llama8b``, ``llama8b-2``, ...). Call it once per run."""
    section = LLAMA8B.section_of(cluster.profile.model)
    shape = (cluster.world_size, cluster.topology.nproc_per_node, cluster.placement.nodes)

    def spec(pending: list[str]) -> JSONObject:
        return llama8b.spec(section, pending, *shape)

    ordered = sorted(section.strategies, key=lambda s: s in plan.ZERO3)  # ZeRO-3 last (``plan.ZERO3``)
    found = plan.run_jobs([ordered], _launcher(cluster, llama8b.PROBE, spec), llama8b.PROBE)
    return {s: {"job": None, **found[s]} for s in section.strategies}


def stage_first(cluster: ClusterRun, strategies: list[str], base: plan.Baseline | str | None = None) -> bool:
    """Start the first training job that ``strategy_runs`` will run for these arguments now, ahead of its
    turn (``ClusterRun.stage``); False where it cannot be (or nothing would run)."""
    training = TRAINING.section_of(cluster.profile.model)
    parts = plan.with_baseline(training, strategies, base)
    failed = _unusable(cluster, parts)
    groups = plan.job_groups(training, [s for s in parts if s not in failed])
    if not groups:
        return False
    return cluster.stage(plan.PROBE, _spec(cluster, groups[0], base), plan.job_key(0), parts=len(groups[0]))


def _unusable(cluster: ClusterRun, parts: list[str]) -> dict[str, plan.StrategyResult]:
    """The error of each strategy whose DeepSpeed JSON is unreadable: it fails alone, not its job."""
    failed: dict[str, plan.StrategyResult] = {}
    for strategy in parts:
        try:
            if strategy != plan.BASELINE_PART:
                plan.user_config(cluster.profile, strategy)
        except plan.TrainingPlanError as exc:
            failed[strategy] = {"error": str(exc), "strategy": strategy, "job": None}
    return failed


def _spec(cluster: ClusterRun, parts: list[str], base: plan.Baseline | str | None) -> JSONObject:
    topo, place = cluster.topology, cluster.placement
    shape = (cluster.world_size, topo.nproc_per_node, place.nodes)
    return plan.spec(cluster.profile, parts, *shape, base if isinstance(base, plan.Baseline) else None)


def baseline_run(
    cluster: ClusterRun, base: plan.Baseline, strategy: str, runs: dict[str, plan.StrategyResult] | None = None
) -> dict[str, Any]:  # Any: the suite's test reads its figures as numbers
    """The scaling baseline: this node's figures from the strategies' job (``runs``, from ``strategy_runs``)
    where it ran there, else ``strategy`` alone on the smaller world; raises ProbeError when it fails."""
    shared = (runs or {}).get(plan.BASELINE_PART)
    if shared is not None:
        result = plan.node_baseline(shared, cluster.placement.node_rank)
        if result.get("error"):
            raise ProbeError(f"the scaling baseline ({base.label}) failed: {result['error']}")
        return {**result, "job": shared.get("job")}
    spec = plan.spec(cluster.profile, [strategy], base.world_size, base.ranks_per_node, base.nodes)
    found = cluster.probe(plan.PROBE, spec, key=plan.BASELINE_KEY, ranks_per_node=base.ranks_per_node, nodes=base.nodes)
    runs_found = validated(plan.PROBE, plan.TrainingResult, found).get("strategies", {})
    result = runs_found.get(strategy) or {"error": f"the baseline job has no result for {strategy}"}
    if result.get("error"):
        raise ProbeError(f"the scaling baseline ({base.label}) failed: {result['error']}")
    return {**result, "job": plan.BASELINE_KEY}
