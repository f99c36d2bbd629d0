"""Does every node and every GPU run the same software with the same settings, and the pinned values where
the profile pins them (a golden configuration)?"""

from __future__ import annotations

import pytest

from acceptance.families import drift as drift_rules
from acceptance.plugin.api import Checker, ClusterRun, Figure, probe_result


@pytest.fixture(scope="module")
def drift(cluster: ClusterRun) -> drift_rules.DriftResult:
    return probe_result(cluster, "drift", drift_rules.DriftResult)


@pytest.fixture(scope="module")
def figures(cluster: ClusterRun, drift: drift_rules.DriftResult) -> dict[str, Figure]:
    pins = drift_rules.Pins.from_profile(cluster.profile.model)
    return {f.metric: f for f in drift_rules.evaluate(drift, pins)}


def test_fields_measured(drift: drift_rules.DriftResult, figures: dict[str, Figure], check: Checker) -> None:
    """Every node's and GPU's fields go into the evidence; how many fields some node could not read is
    recorded (no NVML, no InfiniBand adapter), never taken for agreement."""
    check.measurements("nodes", drift["nodes"])
    check.measurements("gpus", drift["gpus"])
    if drift["injected"]:
        check.measurements("injected", drift["injected"])
    check(figures["drift.fields_not_measured"])


def test_nodes_agree(figures: dict[str, Figure], check: Checker) -> None:
    """Kernel, OS, Python, torch, CUDA, NCCL, driver, NIC firmware and rates: what most nodes have, on every node."""
    check(figures["drift.nodes_differing"])


def test_gpus_agree(figures: dict[str, Figure], check: Checker) -> None:
    """Name, VBIOS, ECC, persistence and MIG modes, power limit, application clocks, PCIe maximum: alike."""
    check(figures["drift.gpus_differing"])


def test_golden(figures: dict[str, Figure], check: Checker) -> None:
    """Every node (GPU) holds the value the profile pins (``drift.golden``); a pinned value nobody could read
    is not confirmed: never a pass."""
    check(figures["drift.golden_mismatches"])
