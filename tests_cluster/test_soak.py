"""Does every GPU keep computing right, and keep its speed, under minutes of full load? (Opt-in: ``-m soak``,
or the burn-in tier; ``soak.duration_s`` sets how long.)"""

from __future__ import annotations

import pytest

from acceptance.families import soak as soak_rules
from acceptance.plugin.api import Checker, ClusterRun, Figure, probe_result, probe_wall_s

# every second of soak.duration_s soaked: a soak stopped part-way is no pass, whatever it measured until then


@pytest.fixture(scope="module")
def soak(cluster: ClusterRun) -> soak_rules.SoakResult:
    """The soak's result; of a soak stopped part-way (its timeout, a killed rank), its last checkpoint's,
    so that every count is judged on what it measured until then (``soak_rules.from_partial``)."""
    parts = soak_rules.parts(soak_rules.section(cluster.profile.model).duration_s, cluster.timeout("soak"))
    try:
        return probe_result(cluster, "soak", soak_rules.SoakResult, parts=parts)
    except pytest.fail.Exception as failed:  # the probe's error, as probe_result words it
        found = soak_rules.from_partial(cluster.partial("soak"), str(failed.msg))
        if found is None:  # stopped before its first checkpoint: nothing to judge
            raise
        return found


@pytest.fixture(scope="module")
def counts(soak: soak_rules.SoakResult) -> dict[str, Figure]:
    return {f.metric: f for f in soak_rules.counts(soak)}


def test_every_rank_soaked(cluster: ClusterRun, soak: soak_rules.SoakResult, check: Checker) -> None:
    """Every rank ran for the whole duration; its figures go into the evidence (its samples and windows are
    in the probe's result there). A soak stopped part-way fails here, with the seconds it soaked."""
    check.measurements("per_gpu", soak_rules.table(soak))
    if soak["injected"]:
        check.measurements("injected", soak["injected"])
    missing = cluster.world_size - len(soak["ranks"])
    detail = f"{len(soak['ranks'])} ranks reported, {cluster.world_size} ran" if missing else ""
    check("soak.missing_ranks", missing, "ranks", detail)
    check("soak.wall_s", probe_wall_s(cluster, "soak"), "s", f"soak.duration_s {soak['config']['duration_s']:g} s")
    check(soak_rules.completed(soak))


@pytest.mark.parametrize(
    "metric", ["soak.gemm_wrong_elements", "soak.gemm_disagreeing_gpus", "soak.gemm_reference_errors"]
)
def test_gemm_results(counts: dict[str, Figure], metric: str, check: Checker) -> None:
    """Each result equals the GPU's first, bit for bit; the first equals the other GPUs' of its model and
    an fp64 product within the arithmetic's bound."""
    check(counts[metric])


def test_memory_patterns(
    cluster: ClusterRun, soak: soak_rules.SoakResult, counts: dict[str, Figure], check: Checker
) -> None:
    """Walking ones, seeded random and address-in-address over most of the free memory: every word read back,
    over at least ``soak.memory_coverage_min`` of the memory asked for on every rank."""
    check(counts["soak.memory_bad_words"])
    check(soak_rules.memory_coverage(soak))


def test_allreduce_under_load(counts: dict[str, Figure], check: Checker) -> None:
    """An all_reduce of exactly summable data beside the GEMMs, every element of every result checked."""
    check(counts["soak.allreduce_wrong"])


@pytest.mark.parametrize("metric", ["soak.ecc_new_errors", "soak.remapped_rows_new", "soak.xid_new"])
def test_no_new_errors(counts: dict[str, Figure], metric: str, check: Checker) -> None:
    """NVML's uncorrectable ECC errors and remapped rows before and after, its XID events during."""
    check(counts[metric])


def test_no_slowdown(counts: dict[str, Figure], check: Checker) -> None:
    """No thermal or hardware slowdown held a GPU's clocks back (``soak.slowdown_reasons``)."""
    check(counts["soak.slowdown_gpus"])


@pytest.mark.parametrize("dtype", list(soak_rules.DTYPE_FIGURE))
def test_sustained_speed(cluster: ClusterRun, soak: soak_rules.SoakResult, dtype: str, check: Checker) -> None:
    """Each GPU's sustained TFLOP/s (the median of its windows) within ``soak.tolerance`` of the median; the
    drop from the first minute to the last is recorded."""
    low, median, below, sag = soak_rules.speed_figures(soak, dtype)
    if low.skip:
        pytest.skip(low.skip)
    # a GPU that could not run the GEMM fails the test
    check.all([low, median, sag], unmeasured=low.unmeasured_text)
    check(below.metric, below.value, below.unit, below.detail)


def test_steady_state(soak: soak_rules.SoakResult, check: Checker) -> None:
    """The hottest GPU's steady temperature and memory temperature and the highest steady power: recorded."""
    found = soak_rules.steady_figures(soak)
    figures = [f for f in found if not f.skip]
    if not figures:
        pytest.skip("; ".join(dict.fromkeys(f.skip or "" for f in found)))
    check.all(figures)
