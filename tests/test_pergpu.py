"""Per-GPU figures: the median, the GPU named when it falls behind, the burn-in verdict, and the compute
probe's CPU path end to end through pytest on local-cpu."""

from __future__ import annotations

import json
import os
import shutil
import statistics
import time
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import torch

from acceptance.families import compute as pergpu
from acceptance.families.compute import COMPUTE
from acceptance.probes import compute as compute_probe

ROOT = Path(__file__).resolve().parent.parent
INSTALLED = any(ep.value == "acceptance.plugin" for ep in entry_points(group="pytest11"))
PLUGIN_ARGS: tuple[str, ...] = () if INSTALLED else ("-p", "acceptance.plugin")
RUN_TIMEOUT_S = 300  # only so that a broken launcher cannot hang CI; nothing here measures speed


def gpu(node: int, index: int, tflops: float | None, **extra: Any) -> dict[str, Any]:
    row = {
        "host": f"gpu-node-{node}",
        "node_rank": node,
        "rank": node * 8 + index,
        "gpu": index,
        "uuid": f"GPU-{index}f2a{node}c1e-7b3d-4e5f-8a9b-0c1d2e3f4a5b",
        "matmul_tflops": tflops,
        "not_measured": {} if tflops is not None else {"matmul_tflops": "out of memory"},
    }
    return {**row, **extra}


def cluster(slow: float = 611.0) -> list[dict[str, Any]]:
    rows = [gpu(n, i, 784.0 + (i % 3)) for n in (0, 1) for i in range(8)]
    rows[13]["matmul_tflops"] = slow  # gpu-node-1 GPU 5
    return rows


def test_summary_is_min_median_max_and_names_the_slowest() -> None:
    found = pergpu.summary(cluster(), "matmul_tflops")
    assert found is not None
    assert (found["min"], found["median"], found["max"], found["count"]) == (611.0, 785.0, 786.0, 16)
    assert found["slowest"] == "gpu-node-1 GPU 5 (GPU-5f2a...)"
    assert pergpu.summary(cluster(), "copy_gbps") is None


def test_window_spread_names_the_unsteady_gpu() -> None:
    rows = cluster()
    rows[2]["windows"] = {"matmul_tflops": [700.0, 790.0, 786.0, 787.0, 785.0]}  # one window disturbed
    rows[13]["windows"] = {"matmul_tflops": [611.0, 612.0, 610.0]}
    found = pergpu.summary(rows, "matmul_tflops")
    assert found is not None
    assert found["slowest_windows"] == [611.0, 612.0, 610.0]
    assert found["window_spread_max"] == pytest.approx(90.0 / 786.0)  # rows[2] reads 786, its median
    assert found["window_spread_gpu"].startswith("gpu-node-0 GPU 2 ")
    assert pergpu.window_spread(rows[0], "matmul_tflops") == 0.0  # no windows recorded (older evidence)


def test_the_slow_gpu_is_named_against_the_median() -> None:
    rows = [gpu(1, i, 784.0) for i in range(8)]
    rows[5]["matmul_tflops"] = 611.0
    worst = pergpu.shortfalls(rows, "matmul_tflops")[0]
    assert worst.row["gpu"] == 5 and round(worst.fraction, 3) == 0.221
    assert pergpu.describe(worst, "matmul_tflops") == (
        "gpu-node-1 GPU 5 (GPU-5f2a...) matmul 611 TFLOP/s, 22% under the median 784"
    )


def test_the_clock_events_seen_while_timing_come_with_the_gpu() -> None:
    capped = {"matmul_tflops": {"clock_events": {"sw_power_cap": 1.0, "hw_thermal": 0.25}}}
    rows = [gpu(1, i, 784.0) for i in range(4)] + [gpu(1, 4, 611.0, clocks=capped)]
    worst = pergpu.shortfalls(rows, "matmul_tflops")[0]
    assert pergpu.describe(worst, "matmul_tflops").endswith(
        "under the median 784 (clock events while timed: sw_power_cap (power cap) 100%, "
        "hw_thermal (thermal slowdown (hardware)) 25%)"
    )
    assert pergpu.summary(rows, "matmul_tflops")["slowest_clocks"].startswith("clock events while timed")  # type: ignore[index]
    unsampled = {
        "matmul_tflops": {"clock_events": None, "clock_events_reason": "no GPU: sampled with NVML on GPUs only"}
    }
    assert pergpu.clocks(gpu(0, 0, 1.0, clocks=unsampled), "matmul_tflops") == (
        "clock events not sampled: no GPU: sampled with NVML on GPUs only"
    )


def test_within_tolerance_when_no_gpu_lags() -> None:
    shorts = pergpu.shortfalls(cluster(slow=780.0), "matmul_tflops")
    assert max(s.fraction for s in shorts) < 0.01
    assert all(s.fraction == 0.0 for s in shorts if s.value >= s.median)


def test_node_median_judges_each_gpu_by_its_own_node() -> None:
    rows = [gpu(0, i, 700.0) for i in range(4)] + [gpu(1, i, 800.0) for i in range(4)]
    rows[1]["matmul_tflops"] = 630.0
    by_cluster = pergpu.shortfalls(rows, "matmul_tflops", "cluster")
    by_node = pergpu.shortfalls(rows, "matmul_tflops", "node")
    # against the cluster median (750) every GPU of node 0 lags; against its own node's only GPU 1 does
    assert sum(s.fraction > 0.05 for s in by_cluster) == 4
    assert [s.row["gpu"] for s in by_node if s.fraction > 0.05] == [1]
    assert pergpu.describe(by_node[0], "matmul_tflops").endswith("10% under the median of node gpu-node-0 700")


def test_a_gpu_that_did_not_measure_is_reported_with_its_reason() -> None:
    rows = [gpu(0, 0, 780.0), gpu(0, 1, None)]
    assert pergpu.not_measured(rows, "matmul_tflops") == ["out of memory (gpu-node-0 GPU 1 (GPU-1f2a...))"]
    assert [s.row["gpu"] for s in pergpu.shortfalls(rows, "matmul_tflops")] == [0]


def test_a_figure_measured_on_some_gpus_only_names_the_others() -> None:
    rows = [gpu(0, 0, 780.0), gpu(0, 1, None), gpu(1, 0, 781.0), gpu(1, 1, None)]
    rows[3]["not_measured"] = {"matmul_tflops": "CUDA error: an illegal memory access"}
    assert pergpu.partly_measured(rows, "matmul_tflops") == (
        "matmul_tflops: measured on 2 of 4 GPUs, not on these:\n"
        "  out of memory (gpu-node-0 GPU 1 (GPU-1f2a...))\n"
        "  CUDA error: an illegal memory access (gpu-node-1 GPU 1 (GPU-1f2a...))"
    )
    # every GPU measured it, or none did (the figure does not apply: the test skips): nothing to add
    assert pergpu.partly_measured(rows[::2], "matmul_tflops") is None
    assert pergpu.partly_measured(rows[1::2], "matmul_tflops") is None
    assert pergpu.partly_measured(rows, "copy_gbps") is None


def burnin(digest: str, differing: int = 0) -> dict[str, Any]:
    return {"digest": digest * 64, "calls": 100, "calls_differing": differing, "seconds": 1.0, "tflops": 780.0}


def test_burnin_names_the_first_gpu_that_disagrees() -> None:
    rows = [gpu(0, i, 780.0, burnin=burnin("a")) for i in range(4)]
    rows[2]["burnin"] = burnin("b")
    verdict = pergpu.burnin_verdict(rows)
    assert verdict["majority"] is True and verdict["reference"] == "a" * 64
    assert verdict["first"] == (
        "gpu-node-0 GPU 2 (GPU-2f2a...): result digest bbbbbbbbbbbb differs from the reference aaaaaaaaaaaa"
    )
    assert len(verdict["disagreeing"]) == 1


def test_burnin_without_majority_takes_rank_0_and_counts_unstable_repeats() -> None:
    rows = [gpu(0, 0, 780.0, burnin=burnin("a")), gpu(0, 1, 780.0, burnin=burnin("b", differing=3))]
    verdict = pergpu.burnin_verdict(rows)
    assert verdict["majority"] is False and verdict["reference"] == "a" * 64
    assert verdict["disagreeing"] == [
        "gpu-node-0 GPU 1 (GPU-1f2a...): result digest bbbbbbbbbbbb differs from the reference aaaaaaaaaaaa; "
        "3 of 100 repeated results differ from its first"
    ]
    assert pergpu.burnin_verdict([gpu(0, 0, 1.0, burnin=burnin("a", differing=1))])["first"] is not None


@pytest.fixture
def suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    shutil.copytree(ROOT / "tests_cluster", pytester.path / "tests_cluster")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    monkeypatch.delenv("CLUSTER_PROFILE", raising=False)
    return pytester


@pytest.mark.e2e
def test_compute_probe_cpu_path_on_local_cpu(suite: pytest.Pytester) -> None:
    """Real torchrun jobs: the CPU path measures, the burn-in agrees, and an impossible bound is measured
    again (matmul alone, no second burn-in), then fails with a message that names the slowest rank and
    gives the reading before."""
    folder = suite.path / "evidence"
    bound = "thresholds:\n  compute.matmul_tflops_min: {min: 1000000}\n"
    # tolerance 1: only the impossible bound is out, however far apart two ranks on loaded cores read
    suite.makefile(".yaml", impossible=f"name: impossible-cpu\nextends: local-cpu\ncompute: {{tolerance: 1}}\n{bound}")
    result = suite.runpytest_subprocess(
        *PLUGIN_ARGS,
        "-p",
        "no:cacheprovider",
        "--cluster-profile",
        str(suite.path / "impossible.yaml"),
        "--cluster-evidence",
        str(folder),
        "-rs",
        "tests_cluster/test_compute.py",
        "tests_cluster/test_health.py",
        timeout=RUN_TIMEOUT_S,
    )
    result.stdout.fnmatch_lines(
        [
            "*compute: matmul_tflops out of bounds; measuring again (1 of 1)",
            "compute.matmul_tflops_min = * TFLOP/s, expected >= 1e+06 (profile impossible-cpu)",
            "slowest: * rank ? (cpu); its timed windows *-*; measured 2 times: the slowest GPU read * before this",
            "compute.copy_gbps_min * GB/s * >= 0.05 * PASS",
            "compute.burnin_disagreeing_gpus * 0 * GPUs * == 0 * PASS",
            "*node health reads NVML on GPUs; profile impossible-cpu runs on the CPU*",
            "*h2d_gbps not measured: host links: not applicable on the CPU*",
        ]
    )
    outcomes = result.parseoutcomes()
    assert (outcomes.get("failed"), outcomes.get("passed"), outcomes.get("recorded")) == (1, 5, 3), outcomes
    data = json.loads((folder / "evidence.json").read_text())
    jsonschema.validate(data, json.loads((ROOT / "acceptance" / "evidence" / "evidence.schema.json").read_text()))
    rows = next(t for t in data["tests"] if t["nodeid"].endswith("test_every_rank_measured"))["measurements"]
    assert [r["rank"] for r in rows["per_gpu"]] == [0, 1]
    assert all(r["matmul_tflops"] > 0 and r["copy_gbps"] > 0 and r["burnin"]["calls"] > 0 for r in rows["per_gpu"])
    assert rows["summary"]["h2d_gbps"] is None
    assert all(r["clocks"] == {} for r in rows["per_gpu"])  # no GPU clocks on the CPU path
    for r in rows["per_gpu"]:  # local-cpu: 10 matmuls and 5 copies, in 5 windows; the figure is their median
        assert [len(r["windows"][f]) for f in ("matmul_tflops", "copy_gbps")] == [5, 5]
        assert r["matmul_tflops"] == pytest.approx(statistics.median(r["windows"]["matmul_tflops"]))
    assert [(p["key"], p["status"]) for p in data["probes"]] == [("compute", "ok"), ("compute-again-1", "ok")]
    assert all(len(r["earlier"]["matmul_tflops"]) == 1 for r in rows["per_gpu"])
    again = data["probes"][1]["result"]["rows"]  # the matmul alone, and no burn-in
    assert all("matmul_tflops" in r and "copy_gbps" not in r and "burnin" not in r for r in again)
    first_min = min(r["earlier"]["matmul_tflops"][0] for r in rows["per_gpu"])
    assert rows["remeasured"]["matmul_tflops"]["earlier_min"] == [pytest.approx(first_min)]


def test_profile_sections_and_metric_names(tmp_path: Path) -> None:
    from acceptance.profile.loader import ProfileError, load

    good = tmp_path / "gpu.yaml"
    good.write_text(
        "name: gpu\ntopology: {gpus_per_node: 8, gpu_model: NVIDIA H200}\n"
        "health: {min_driver: '580.159.04', nvlink_links: 18, pcie_gen: 5, pcie_width: 16}\n"
        "compute: {tolerance: 0.05, median_of: node, duration_s: 30, copy_size: 4096M}\n"
        "timeouts: {health: 120, compute: 180}\n"
        "thresholds:\n  compute.matmul_tflops_min: {min: 730}\n  compute.h2d_gbps_below_median: {max: 0.1}\n"
        "  health.temperature_c_max: {max: 80}\n  compute.burnin_disagreeing_gpus: {eq: 0}\n"
    )
    model = load(str(good)).model
    assert COMPUTE.section_of(model).copy_size == "4G" and model.timeouts.for_probe("compute") == 180
    for bad, why in (
        ("health: {min_driver: r580}", "health.min_driver: expected a dotted driver version like 550.54.15"),
        ("compute: {median_of: rack}", "compute.median_of: got 'rack'"),
        ("thresholds: {compute.matmul_tflop_min: {min: 1}}", "no probe measures a metric of this name"),
        ("thresholds: {health.ecc_errors: {eq: 0}}", "no probe measures a metric of this name"),
    ):
        path = tmp_path / "bad.yaml"
        path.write_text(f"name: bad\n{bad}\n")
        with pytest.raises(ProfileError, match=why.replace("(", r"\(")):
            load(str(path))


class _CpuCtx:
    """What the compute probe's timing asks of its context on the CPU path."""

    is_cuda = False
    device = torch.device("cpu")

    def sync(self) -> None:
        pass

    def progress(self) -> None:
        pass


@pytest.mark.parametrize(("iters", "calls"), [(10, [2, 2, 2, 2, 2]), (7, [2, 2, 1, 1, 1]), (3, [1, 1, 1])])
def test_timed_loop_in_windows(iters: int, calls: list[int]) -> None:
    """Up to five windows of near-equal calls, every call timed once; the figure is the median window's."""
    done: list[int] = []
    timed = compute_probe.seconds_per_call(_CpuCtx(), lambda: done.append(1), 0, iters, together=False)  # type: ignore[arg-type]
    assert len(done) == 1 + iters  # one warm-up call, then the timed ones
    assert len(timed.windows) == len(calls) and all(s > 0 for s in timed.windows)
    value, clocks, per_window = timed.rate(1.0)
    assert clocks is None and per_window == [1.0 / s for s in timed.windows]
    assert value == statistics.median(per_window)


def test_a_loop_shorter_than_min_s_gets_more_calls_at_the_warm_up_pace(monkeypatch: pytest.MonkeyPatch) -> None:
    """The matmul loops last at least ``compute.matmul_min_s`` (a power-capped GPU's clocks swing with a period
    of about 1 s): a call taking 0.25 s on a clock the test controls, 3 calls asked, at least 2 s wanted: 8."""
    now = [0.0]
    monkeypatch.setattr(time, "perf_counter", lambda: now[0])  # the probe's and its windows' clock
    done: list[int] = []

    def call() -> None:
        done.append(1)
        now[0] += 0.25

    timed = compute_probe.seconds_per_call(_CpuCtx(), call, 0, 3, together=False, min_s=2.0)  # type: ignore[arg-type]
    assert len(done) == 1 + 8 and timed.windows == [0.25] * 5  # windows of 2, 2, 2, 1, 1 calls
    done.clear()
    compute_probe.seconds_per_call(_CpuCtx(), call, 0, 12, together=False, min_s=2.0)  # type: ignore[arg-type]
    assert len(done) == 1 + 12  # never fewer than asked


def test_the_pace_is_the_warm_up_s_last_round(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a GPU the warm-up goes on for WARMUP_S in rounds; the clocks ramp over the first, so the pace the
    loop's length is reckoned from is the last round's: 2 calls of 0.375 s, then 2 of 0.25 s."""
    now, took = [0.0], [0.375, 0.375]

    class GpuLike(_CpuCtx):
        is_cuda = True

    def call() -> None:
        now[0] += took.pop(0) if took else 0.25

    monkeypatch.setattr(time, "perf_counter", lambda: now[0])
    assert compute_probe.warm_up(GpuLike(), call, 2) == 0.25  # type: ignore[arg-type]
    assert now[0] == 1.25  # rounds until WARMUP_S (1 s) had passed: 0.75, then 1.25
