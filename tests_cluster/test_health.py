"""Is every GPU there, the model the profile says, and healthy: ECC, memory repairs, links, clocks, heat."""

from __future__ import annotations

import pytest

from acceptance.families import health as health_rules
from acceptance.plugin.api import Checker, ClusterRun, Figure, probe_result, probe_wall_s


@pytest.fixture(scope="module")
def health(cluster: ClusterRun) -> health_rules.HealthResult:
    if cluster.topology.device != "cuda":
        pytest.skip(
            f"node health reads NVML on GPUs; profile {cluster.profile.name} runs on the CPU (topology.device: cpu)"
        )
    return probe_result(cluster, "health", health_rules.HealthResult)


@pytest.fixture(scope="module")
def figures(cluster: ClusterRun, health: health_rules.HealthResult) -> dict[str, Figure]:
    expect = health_rules.Expect.from_profile(cluster.profile.model)
    return {f.metric: f for f in health_rules.evaluate(health["nodes"], expect)}


def test_inventory(health: health_rules.HealthResult, check: Checker) -> None:
    """Every GPU's identity, versions and modes go into the evidence; every node must have answered."""
    rows = health_rules.inventory(health["nodes"])
    check.measurements("gpus", rows)
    check.measurements("pcie_under_load", {"on": health["pcie_under_load"], "copies": health["load_copies"]})
    # a node without GPUs is judged by health.gpu_count (always gated on a GPU profile) and nvml_unavailable


# a node short of GPUs fails here, with the preflight's one line, and the families that need them skip
GATES = [
    pytest.param(m, marks=[pytest.mark.cluster_preflight] if m == "health.gpu_count" else [])
    for m in health_rules.METRICS
]


@pytest.mark.parametrize("metric", GATES, ids=[m.removeprefix("health.") for m in health_rules.METRICS])
def test_gate(figures: dict[str, Figure], metric: str, check: Checker) -> None:
    # skipped where the profile does not ask for it, or no GPU could answer (the reasons named)
    check(figures[metric])


def test_probe_time(cluster: ClusterRun, health: health_rules.HealthResult, check: Checker) -> None:
    wall_s = probe_wall_s(cluster, "health")
    check("health.wall_s", wall_s, "s", "start to result, imports included where it started its job or the worker")
