"""compare (better direction, tolerance, regressions, exit status), rebaseline (ReFrame-style bounds from
evidence) and export (CSV), on the committed GPU evidence."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from acceptance.cli.main import main
from acceptance.evidence.model import EvidenceDoc
from acceptance.evidence.store import read_evidence
from acceptance.profile import loader as profiles
from acceptance.profile.baseline import change, tolerance_for
from acceptance.profile.judge import Judge
from acceptance.profile.metrics import better, kind, scale
from acceptance.reports import compare
from acceptance.schema.bounds import Threshold, evaluate, limits
from acceptance.schema.noise import log_noise
from tests.harness import EVIDENCE


def load(name: str) -> dict[str, Any]:
    return json.loads((EVIDENCE / name / "evidence.json").read_text())


def model(data: dict[str, Any]) -> EvidenceDoc:
    return EvidenceDoc.model_validate(data)


def write(tmp_path: Path, name: str, data: dict[str, Any]) -> str:
    (tmp_path / name).mkdir()
    (tmp_path / name / "evidence.json").write_text(json.dumps(data))
    return str(tmp_path / name)


NO_REGRESSION = (
    "regressions (figures, gated or not, worse beyond tolerance and noise, or turned FAIL by the same bound): 0"
)


def set_value(data: dict[str, Any], metric: str, factor: float) -> float:
    check = next(c for t in data["tests"] for c in t["checks"] if c["metric"] == metric)
    check["value"] *= factor
    return float(check["value"])


@pytest.mark.parametrize(
    ("metric", "direction"),
    [
        ("collectives.all_reduce.busbw_gbps@1G", "higher"),
        ("collectives.all_reduce.time_us@1M", "lower"),
        ("collectives.all_reduce.wrong@1M", "lower"),
        ("collectives.all_reduce.busbw_gbps@1024M", "higher"),
        ("compute.matmul_tflops_min", "higher"),
        ("compute.matmul_tflops_below_median", "lower"),
        ("training.zero3.tokens_per_s_per_gpu", "higher"),
        ("training.ddp.step_time_s", "lower"),
        ("training.ddp.peak_mem_gib", "lower"),
        ("training.ddp.loss_first", "none"),
        ("health.nvlink_links_min", "higher"),
        ("health.temperature_c_max", "lower"),
        ("connectivity.world_size", "none"),
        ("internode.one_gpu_per_node.all_reduce.busbw_gbps@16M", "higher"),
        ("no.such.metric", "none"),
    ],
)
def test_better_direction_from_the_registry(metric: str, direction: str) -> None:
    assert better(metric) == direction


def test_change_is_worse_in_the_metric_s_own_direction() -> None:
    assert change("training.ddp.step_time_s", 1.0, 1.2, 0.05).worse_by == pytest.approx(0.2)
    assert change("training.ddp.step_time_s", 1.0, 0.8, 0.05).worse_by == 0
    assert change("compute.matmul_tflops_min", 100.0, 80.0, 0.05).beyond
    assert not change("compute.matmul_tflops_min", 100.0, 96.0, 0.05).beyond
    assert change("collectives.all_reduce.wrong@1M", 0, 3, 0.05).worse_by == math.inf  # from 0 to some
    assert change("compute.matmul_tflops_min", 100.0, None, 0.05).beyond  # measured before, not a number now
    assert not change("training.ddp.loss_first", 1.0, 9.0, 0.05).beyond  # no better side


def test_tolerance_default_profile_and_per_metric() -> None:
    assert tolerance_for(None, "x") == 0.05
    profile = {"baseline": {"tolerance": 0.1, "tolerances": {"training.zero3.tokens_per_s_per_gpu": 0.2}}}
    assert tolerance_for(profile, "training.ddp.tokens_per_s_per_gpu") == 0.1
    assert tolerance_for(profile, "training.zero3.tokens_per_s_per_gpu") == 0.2
    assert tolerance_for(profile, "training.zero3.tokens_per_s_per_gpu", override=0.01) == 0.01


def test_h100_rerun_reports_the_moved_bound_not_a_regression(capsys: pytest.CaptureFixture[str]) -> None:
    """The ZeRO-3 figure rose 5.3% and failed only because the profile raised its bound: the profile changed,
    not the cluster; a FAIL by a bound the old run did not have is "bound moved", never a regression."""
    assert main(["compare", str(EVIDENCE / "h100-x1"), str(EVIDENCE / "h100-x1-zero3-variance")]) == 0
    out = capsys.readouterr().out
    head = out.split("\n\n")[0]
    assert "old: " in head and ": PASS, profile h100-x1" in head and ": FAIL, profile h100-x1" in head
    assert NO_REGRESSION in head
    assert "bound moved (the profile changed, not the figure): 1" in head
    zero3 = next(line for line in head.splitlines() if "training.zero3.tokens_per_s_per_gpu" in line)
    assert "22,383 -> 23,571 tokens/s (+5.3%" in zero3
    assert "verdict PASS -> FAIL against >= 24200 (the old run's bound: >= 21200)" in zero3
    assert "profile thresholds[training.zero3.tokens_per_s_per_gpu].min: 21200.0 -> 24200.0" in head
    table = out.split("\n\n")[1].splitlines()
    assert table[0].split()[:4] == ["metric", "better", "old", "new"]
    assert table[2].startswith("training.zero3.tokens_per_s_per_gpu") and table[2].endswith("bound moved")
    assert not any(line.endswith("REGRESSION") for line in table)


def test_the_same_bound_failed_is_a_regression(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The same pair judged by one bound: the figure that now fails it regressed (exit 1)."""
    new = load("h100-x1-zero3-variance")
    old = load("h100-x1")
    metric = "training.zero3.tokens_per_s_per_gpu"
    moved = next(c for t in new["tests"] for c in t["checks"] if c["metric"] == metric)
    for check in (c for t in old["tests"] for c in t["checks"] if c["metric"] == metric):
        check["threshold"], check["bound"] = moved["threshold"], moved["bound"]
    assert main(["compare", write(tmp_path, "old", old), write(tmp_path, "new", new)]) == 1
    head = capsys.readouterr().out.split("\n\n")[0]
    assert (
        f"  {metric}: 22,383 -> 23,571 tokens/s (+5.3%, higher is better): verdict PASS -> FAIL against >= 24200"
        in head
    )


def test_a_run_against_itself_has_no_regression(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", str(EVIDENCE / "h200-x2"), str(EVIDENCE / "h200-x2")]) == 0
    assert NO_REGRESSION in (capsys.readouterr().out)


@pytest.mark.parametrize(
    ("metric", "factor", "regressed"),
    [
        ("compute.matmul_tflops_min", 0.90, True),  # gated, 10% worse: beyond 5%
        ("compute.matmul_tflops_min", 0.97, False),  # gated, 3% worse: within 5%
        ("compute.matmul_tflops_min", 1.50, False),  # better
        ("collectives.all_reduce.time_us@1M", 1.10, True),  # gated, lower is better, 10% slower
        ("compute.h2d_gbps_median", 0.50, False),  # information measured once: no noise known, never counted
    ],
)
def test_regression_is_a_gated_figure_worse_beyond_tolerance(
    tmp_path: Path, metric: str, factor: float, regressed: bool
) -> None:
    new = load("h200-x2")
    set_value(new, metric, factor)
    rows = {r.change.metric: r for r in compare.rows(model(load("h200-x2")), model(new))}
    assert rows[metric].regression is regressed
    expected = 1 if regressed else 0
    assert main(["compare", str(EVIDENCE / "h200-x2"), write(tmp_path, "new", new)]) == expected


# two healthy local-cpu runs of one shared 2-core machine, minutes apart, and the same suite once more with
# the loopback limited to 400 Mbit/s (a token bucket on lo in a network namespace: every profile floor
# still holds, the run PASSes); trimmed of the tests' measurements, every check and probe result as recorded
HEALTHY = ("local-cpu-a", "local-cpu-b")
SLOW = "local-cpu-slow-loopback"
ALL_REDUCE = "collectives.all_reduce.busbw_gbps@8M"


def test_two_healthy_local_cpu_runs_compare_clean_on_their_gated_figures(capsys: pytest.CaptureFixture[str]) -> None:
    """``--gated-only``: what the profile bounds held between the two runs."""
    assert main(["compare", *(str(EVIDENCE / run) for run in HEALTHY), "--gated-only"]) == 0
    out = capsys.readouterr().out
    assert "regressions (gated figures worse beyond tolerance and noise, or turned FAIL by the same bound): 0" in out
    assert "REGRESSION" not in out


# three pairs of healthy local-cpu runs of one shared 2-core machine (2026-12-06, 20:12-20:28, the six one
# after another while other jobs came and went), trimmed of the tests' measurements: before the tolerance
# was judged on both sides alike and against the change less its noise, five of the six comparisons exited 1
# (1 to 14 ungated figures, e.g. all_reduce time_us@1M 1,396 -> 12,312 us with busbw -88.6%), and so did
# local-cpu-a against local-cpu-b (the 64K all_to_all and all_gather, -93.9%)
RERUNS = [("local-cpu-rerun-1a", "local-cpu-rerun-1b"), ("local-cpu-rerun-2a", "local-cpu-rerun-2b"),
          ("local-cpu-rerun-3a", "local-cpu-rerun-3b")]  # fmt: skip


@pytest.mark.parametrize(("old", "new"), [*RERUNS, HEALTHY, *((b, a) for a, b in [*RERUNS, HEALTHY])], ids=str)
def test_healthy_local_cpu_reruns_compare_clean_both_ways(
    old: str, new: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every figure counted, gated or not: a figure the shared machine moved between the runs stays within
    what the tolerance and the two runs' own windows let it move (exit 0)."""
    assert main(["compare", str(EVIDENCE / old), str(EVIDENCE / new)]) == 0
    head = capsys.readouterr().out.split("\n\n")[0]
    assert NO_REGRESSION in head


def test_a_time_and_the_bandwidth_it_gives_regress_alike() -> None:
    """One reading stated two ways: a collective's time per call 8.8x longer and its busbw 8.8x lower are
    judged by the same tolerance (a fall to a tenth, a rise tenfold, at 90%)."""
    time, busbw = (change(f"collectives.all_reduce.{m}@1M", *v, 0.9) for m, v in
                   (("time_us", (1396.0, 12312.0)), ("busbw_gbps", (1.6, 1.6 / 8.82))))  # fmt: skip
    assert not time.beyond and not busbw.beyond
    assert change("collectives.all_reduce.time_us@1M", 100.0, 1100.0, 0.9).beyond  # 11x: past a tenfold rise
    assert change("collectives.all_reduce.busbw_gbps@1M", 1.1, 0.1, 0.9).beyond
    assert change("connectivity.barrier_latency_us", 100.0, 2000.0, 20).beyond is False  # 20: a rise by 21x


def test_the_noise_adds_to_the_tolerance_only_where_no_bound_gates_the_figure() -> None:
    """18% slower with a standard error of 0.05 (3 of them: 0.15 in log) and a 5% tolerance (0.051): past each
    of them, which a gated figure must be, but not past the two together, which an ungated one must be."""
    args = ("collectives.all_reduce.busbw_gbps@1M", 100.0, 82.0, 0.05, 0.05)
    assert change(*args).beyond
    assert not change(*args, ungated=True).beyond
    assert change("collectives.all_reduce.busbw_gbps@1M", 100.0, 79.0, 0.05, 0.05, ungated=True).beyond


def test_an_ungated_figure_worse_beyond_tolerance_and_noise_is_a_regression(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A healthy run and the same run with one ungated figure 30x slower in every window (a path that
    stalled): beyond the 90% tolerance and the windows' noise, a regression (exit 1), named as not gated."""
    old, new = load(RERUNS[0][0]), load(RERUNS[0][0])
    row = next(r for p in new["probes"] if p["name"] == "collectives" for r in p["result"]["rows"]
               if r["op"] == "all_gather" and r["size"] == "64K")  # fmt: skip
    _windows(new, "all_gather", "64K", [w / 30 for w in row["busbw_windows_gbps"]])
    assert main(["compare", write(tmp_path, "old", old), write(tmp_path, "new", new)]) == 1
    head = capsys.readouterr().out.split("\n\n")[0]
    assert "  collectives.all_gather.busbw_gbps@64K: " in head and "(not gated: no bound in either run)" in head


def _nvlink_off(data: dict[str, Any], factor: float) -> None:
    """Every collectives figure of ``data`` as a node that lost NVLink reads it: busbw x ``factor``, time /
    ``factor``, each timed window's busbw too."""
    for probe in data["probes"]:
        for row in probe["result"].get("rows", []) if probe["name"] == "collectives" else []:
            row["busbw_windows_gbps"] = [w * factor for w in row["busbw_windows_gbps"]]
    for test in data["tests"]:
        for check in test["checks"]:
            if ".busbw_gbps@" in check["metric"]:
                check["value"] *= factor
            elif ".time_us@" in check["metric"]:
                check["value"] /= factor


def _unbound(data: dict[str, Any]) -> None:
    """The collectives' bounds removed (``init`` on a node no reference row fits), and five steady timed
    windows recorded per row (this run predates them) so that each figure has its noise."""
    for probe in data["probes"]:
        for row in probe["result"].get("rows", []) if probe["name"] == "collectives" else []:
            row["busbw_windows_gbps"] = [row["busbw_gbps"] * w for w in STEADY]
    for test in data["tests"]:
        for check in test["checks"]:
            if check["metric"].startswith("collectives.") and ".wrong@" not in check["metric"]:
                check.update(bound="", threshold=None, verdict="info")


def test_the_collectives_of_a_node_without_nvlink_regress_though_nothing_bounds_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A healthy run and the same node with NVLink unused (busbw -93%), under a profile that bounds no
    collective: compare exits 1 naming the collectives; ``--gated-only`` keeps the old reading (exit 0)."""
    old, new = load("h200-x2"), load("h200-x2")
    _unbound(old)
    _unbound(new)
    _nvlink_off(new, 0.07)
    args = ["compare", write(tmp_path, "old", old), write(tmp_path, "new", new)]
    assert main(args) == 1
    head = capsys.readouterr().out.split("\n\n")[0]
    named = {line.split(":")[0].strip() for line in head.splitlines() if line.startswith("  collectives.")}
    assert "collectives.all_reduce.busbw_gbps@1G" in named
    assert all(".busbw_gbps@" in m or ".time_us@" in m for m in named)
    assert main([*args, "--gated-only"]) == 0
    out = capsys.readouterr().out
    assert "regressions (gated figures worse" in out and "worse (not gated)" in out


def test_a_slowed_loopback_is_a_regression(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", str(EVIDENCE / HEALTHY[0]), str(EVIDENCE / SLOW)]) == 1
    head = capsys.readouterr().out.split("\n\n")[0]
    line = next(line for line in head.splitlines() if line.startswith(f"  {ALL_REDUCE}: "))
    assert "higher is better): beyond tolerance and noise (" in line


def _windows(data: dict[str, Any], op: str, size: str, windows: list[float]) -> None:
    """The collectives row of ``op`` at ``size`` measured ``windows`` (GB/s), its figure their median."""
    row = next(r for p in data["probes"] if p["name"] == "collectives" for r in p["result"]["rows"]
               if r["op"] == op and r["size"] == size)  # fmt: skip
    row["busbw_windows_gbps"] = windows
    check = next(c for t in data["tests"] for c in t["checks"] if c["metric"] == f"collectives.{op}.busbw_gbps@{size}")
    check["value"] = sorted(windows)[len(windows) // 2]


NOISY = [1.0, 0.6, 1.4, 0.8, 1.2]  # a shared machine's windows: the median 1.0, 30% either way
STEADY = [1.0, 0.99, 1.01, 1.0, 1.0]  # a quiet machine's


@pytest.mark.parametrize(
    ("windows", "factor", "regressed"),
    [
        (NOISY, 0.8, False),  # 20% slower: beyond the 5% tolerance, within what the windows move on their own
        (STEADY, 0.8, True),  # the same 20% with steady windows: a real change
        (NOISY, 0.3, True),  # 70% slower: beyond tolerance and noise
        (STEADY, 0.97, False),  # within the tolerance
    ],
)
def test_a_change_counts_beyond_tolerance_and_noise(
    tmp_path: Path, windows: list[float], factor: float, regressed: bool
) -> None:
    old, new = load(HEALTHY[0]), load(HEALTHY[0])
    _windows(old, "all_reduce", "8M", windows)
    _windows(new, "all_reduce", "8M", [w * factor for w in windows])
    args = ["compare", write(tmp_path, "old", old), write(tmp_path, "new", new), "--tolerance", "0.05"]
    rows = {r.change.metric: r for r in compare.rows(model(old), model(new), 0.05)}
    assert rows[ALL_REDUCE].regression is regressed
    assert rows[ALL_REDUCE].change.noise is not None
    assert main(args) == (1 if regressed else 0)


def test_the_noise_of_a_median_from_its_readings() -> None:
    """MAD x 1.4826 in log space, x sqrt(pi/2) / sqrt(n): the standard error of a median; none from two."""
    steady = log_noise([100.0] * 5, "5 windows")
    assert steady is not None and steady.standard_error == 0 and steady.readings == 5
    noisy = log_noise([1.0, 2.0, 4.0], "3 windows")  # logs 0, ln 2, ln 4: MAD ln 2
    assert noisy is not None
    assert noisy.standard_error == pytest.approx(math.sqrt(math.pi / 2) * 1.4826 * math.log(2) / math.sqrt(3))
    assert log_noise([1.0, 2.0], "2 windows") is None  # too few to tell a spread
    assert log_noise([1.0, 0.0, 2.0], "a window that moved nothing") is None


def test_a_figure_without_readings_is_judged_by_its_tolerance() -> None:
    assert change("connectivity.barrier_latency_us", 100.0, 120.0, 0.05).beyond
    assert not change("connectivity.barrier_latency_us", 100.0, 120.0, 0.05, noise=0.1).beyond  # ln 1.2 < 0.3
    assert change("connectivity.barrier_latency_us", 100.0, 150.0, 0.05, noise=0.1).beyond
    assert change("compute.matmul_tflops_min", 100.0, 0.0, 0.05, noise=10.0).beyond  # fell to 0: no noise


def test_per_metric_tolerance_from_the_new_profile(tmp_path: Path) -> None:
    new = load("h200-x2")
    set_value(new, "compute.matmul_tflops_min", 0.90)
    new["profile"]["resolved"]["baseline"] = {"tolerance": 0.05, "tolerances": {"compute.matmul_tflops_min": 0.15}}
    assert main(["compare", str(EVIDENCE / "h200-x2"), write(tmp_path, "new", new)]) == 0
    assert main(["compare", str(EVIDENCE / "h200-x2"), str(tmp_path / "new"), "--tolerance", "0.05"]) == 1


@pytest.mark.parametrize(
    ("threshold", "value", "ok", "bound"),
    [
        (Threshold(ref=100, lower=-0.1), 90.0, True, ">= 90 (100 -10%)"),
        (Threshold(ref=100, lower=-0.1), 89.9, False, ">= 90 (100 -10%)"),
        (Threshold(ref=100, lower=-0.1), 1e9, True, ">= 90 (100 -10%)"),  # a faster GPU does not fail
        (Threshold(ref=20, upper=0.25), 25.0, True, "<= 25 (20 +25%)"),
        (Threshold(ref=20, upper=0.25), 25.1, False, "<= 25 (20 +25%)"),
        (Threshold(ref=100, lower=-0.1, upper=0.2), 121.0, False, ">= 90 (100 -10%) and <= 120 (100 +20%)"),
        (Threshold(ref=100, lower=-0.1), math.nan, False, ">= 90 (100 -10%)"),
    ],
)
def test_reference_with_relative_bounds(threshold: Threshold, value: float, ok: bool, bound: str) -> None:
    assert evaluate(threshold, value) == (ok, bound)


def test_limits_of_a_threshold() -> None:
    assert limits(Threshold(ref=100, lower=-0.1)) == (90, None)
    assert limits(Threshold(min=5, max=7)) == (5, 7)
    assert limits(Threshold(ref=10, tol=0.5)) == (5, 15)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"ref": 1.0}, "ref and tol go together"),
        ({"lower": -0.1, "min": 1.0}, "ref and tol go together"),
        ({"ref": 1.0, "tol": 0.1, "lower": -0.1}, "give tol, or lower and/or upper, not both"),
        ({"ref": 1.0, "lower": 0.1}, "less than or equal to 0"),
        ({"ref": 1.0, "upper": -0.1}, "greater than or equal to 0"),
    ],
)
def test_reference_bounds_rejected(fields: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Threshold.model_validate(fields)


def test_rebaseline_writes_bounds_that_the_evidence_meets(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bounds.yaml"
    assert main(["rebaseline", str(EVIDENCE / "h200-x2"), "--profile", "h200-x2", "--tolerance", "0.1",
                 "--tolerance", "training.*=0.15", "-o", str(out)]) == 0  # fmt: skip
    text = out.read_text()
    assert text.startswith("# bounds from ") and "run started 2026-11-22T00:49:15+00:00, verdict PASS" in text
    bounds = yaml.safe_load(text)["thresholds"]
    matmul = bounds["compute.matmul_tflops_min"]
    assert matmul["ref"] == 647.8 and matmul["lower"] == -0.1  # the committed evidence, not 635 from prose
    assert matmul["min"] is None  # replaces the profile's entry whole, also under extends
    assert (
        "tests/data/evidence/h200-x2/evidence.json (2026-11-22T00:49:15+00:00): measured 647.8 TFLOP/s"
        in matmul["source"]
    )
    assert bounds["training.zero3.tokens_per_s_per_gpu"]["lower"] == -0.15
    assert bounds["collectives.all_reduce.time_us@1M"]["upper"] == 0.1  # lower is better: a bound above
    assert not any(key.startswith("collectives.all_reduce.wrong") for key in bounds)  # exact gates stay built in
    # the output is a profile extending the one it bounds, and the run it came from meets every bound
    assert "\nname: h200-x2-rebaselined\nextends: h200-x2\nthresholds:\n" in text
    assert "# a profile: save it as thresholds/h200-x2-rebaselined.yaml" in text
    model = profiles.load(str(out)).model
    measured = {c["metric"]: c["value"] for t in load("h200-x2")["tests"] for c in t["checks"]}
    for metric in bounds:
        assert evaluate(model.thresholds[metric], measured[metric])[0], metric


def test_rebaseline_of_a_profile_s_bounds_only(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rebaseline", str(EVIDENCE / "h100-x1"), "--profile", "h100-x1"]) == 0
    bounds = yaml.safe_load(capsys.readouterr().out)["thresholds"]
    assert set(bounds) <= set(profiles.load("h100-x1").model.thresholds)
    assert bounds["training.zero3.tokens_per_s_per_gpu"]["ref"] == 22383


def _rebased(tmp_path: Path, run: str, *options: str) -> tuple[dict[str, Any], profiles.Profile]:
    """rebaseline of ``run``'s evidence (the figures it gated, or ``options``), and the profile that extends
    local-cpu with it."""
    out = tmp_path / "bounds.yaml"
    assert main(["rebaseline", str(EVIDENCE / run), "-o", str(out), *options]) == 0
    text = out.read_text()
    assert yaml.safe_load(text)["extends"] == "local-cpu"  # the profile the run measured with
    return yaml.safe_load(text)["thresholds"], profiles.load(str(out))


def _failures(profile: profiles.Profile, run: str) -> list[str]:
    """Every check of ``run`` judged again by ``profile``, with the built-in bound the run's test gave a
    figure the profile does not bound (a correctness count's 0, the loss that must fall): those that fail."""
    judge = Judge(profile)
    failed = []
    for check in (c for t in load(run)["tests"] for c in t["checks"]):
        recorded = check.get("threshold")
        default = Threshold.model_validate(recorded) if recorded and not profile.threshold(check["metric"]) else None
        value = math.nan if check["value"] is None else check["value"]
        judged = judge.judge(check["metric"], value, default=default)
        if judged.failed:
            failed.append(f"{check['metric']} = {value} against {judged.bound}")
    return failed


def test_rebaseline_keeps_every_correctness_gate(tmp_path: Path) -> None:
    """From a healthy run, with --all: no correctness gate and no figure judged by its bound alone is
    bounded anew; the loss must still fall by 1% and the canary keeps training.canary_rtol."""
    bounds, rebased = _rebased(tmp_path, HEALTHY[0], "--all")
    assert bounds and all(kind(m) == "performance" and scale(m) != "bound" for m in bounds)
    checks = {c["metric"]: c for t in load(HEALTHY[0])["tests"] for c in t["checks"]}
    correctness = [m for m in checks if kind(m) == "correctness"]
    assert {"training.ddp.loss_ratio", "training.canary.zero3.max_rel_diff", "connectivity.missing_ranks"} <= set(
        correctness
    )
    local = profiles.load("local-cpu")
    for metric in correctness:
        assert rebased.threshold(metric) == local.threshold(metric), metric  # the profile's, or none: built-in
    assert checks["training.ddp.loss_ratio"]["bound"] == "<= 0.99"  # the test's built-in gate, kept


def test_rebaseline_bounds_a_fraction_of_the_median_in_points(tmp_path: Path) -> None:
    bounds, _ = _rebased(tmp_path, HEALTHY[0], "--all")
    checks = {c["metric"]: c for t in load(HEALTHY[0])["tests"] for c in t["checks"]}
    for metric in ("compute.matmul_tflops_below_median", "compute.copy_gbps_below_median"):
        entry, measured = bounds[metric], checks[metric]["value"]
        assert set(entry) == {"max", "source"}, entry  # no ref: a relative step of a figure near 0 is nothing
        assert measured + 0.1 <= entry["max"] + 1e-9 or entry["max"] == checks[metric]["threshold"]["max"]
        assert entry["max"] <= checks[metric]["threshold"]["max"]  # never looser than the bound it ran with


def test_rebaseline_passes_its_own_run_and_the_rerun(tmp_path: Path) -> None:
    """The bounds from one healthy run load as a profile, and that run and the next one on the same
    machine meet every one of them."""
    bounds, rebased = _rebased(tmp_path, HEALTHY[0])
    assert ALL_REDUCE in bounds and "connectivity.barrier_latency_us" in bounds
    assert _failures(rebased, HEALTHY[0]) == []
    assert _failures(rebased, HEALTHY[1]) == []
    assert any(f.startswith(f"{ALL_REDUCE} = ") for f in _failures(rebased, SLOW))  # and the slow link fails


@pytest.mark.parametrize("value", [-0.0, 0.0, 1e-320, 1e308, -1e308, -5.0])
def test_rebaseline_refuses_a_bound_that_always_holds(
    tmp_path: Path, value: float, capsys: pytest.CaptureFixture[str]
) -> None:
    """A figure of 0, a subnormal one or one near a float's end would give a bound that any figure meets
    (``min: 0``, ``max: 1.1e308``): it is left out, said in the output and on stderr."""
    data = load(HEALTHY[0])
    for test in data["tests"]:
        for check in test.get("checks") or []:
            if check["metric"] == ALL_REDUCE:
                check["value"] = value
    (tmp_path / "evidence.json").write_text(json.dumps(data))
    out = tmp_path / "bounds.yaml"
    assert main(["rebaseline", str(tmp_path), "-o", str(out)]) == 0
    text = out.read_text()
    assert ALL_REDUCE not in yaml.safe_load(text)["thresholds"]
    assert f"# left out: {ALL_REDUCE} =" in text and "would always hold" in capsys.readouterr().err
    rebased = profiles.load(str(out))
    assert rebased.threshold(ALL_REDUCE) == profiles.load("local-cpu").threshold(ALL_REDUCE)  # as it was


def test_rebaseline_of_nothing_but_such_figures_is_a_usage_error(tmp_path: Path) -> None:
    data = load(HEALTHY[0])
    for test in data["tests"]:
        for check in test.get("checks") or []:
            check["value"] = 1e308 if check["value"] is not None else None
    (tmp_path / "evidence.json").write_text(json.dumps(data))
    assert main(["rebaseline", str(tmp_path), "--all"]) == 4


@pytest.mark.parametrize("option", ["ten", "1.5", "training.*=x"])
def test_rebaseline_bad_tolerance_is_one_line(option: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rebaseline", str(EVIDENCE / "h200-x2"), "--tolerance", option]) == 4
    err = capsys.readouterr().err
    assert err.startswith(f"cluster-acceptance rebaseline: --tolerance '{option}': expected") and err.count("\n") == 1


def test_export_csv_one_row_per_figure(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", str(EVIDENCE / "h200-x2"), "--csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert list(rows[0]) == ["metric", "value", "unit", "bound", "verdict", "node", "gpu", "source", "test"]
    checks = sum(len(t["checks"]) for t in load("h200-x2")["tests"])
    assert len(rows) == checks + 2 * 5  # every check, then 2 GPUs x 5 per-GPU figures
    matmul = next(r for r in rows if r["metric"] == "compute.matmul_tflops_min")
    assert matmul["node"] == "vm" and matmul["gpu"] == "GPU 0 GPU-a686010c-c983-cf32-64df-1f72bc1b5409"
    assert float(matmul["value"]) == pytest.approx(647.7997) and matmul["bound"] == ">= 570"
    assert matmul["verdict"] == "pass" and matmul["source"].startswith("90% of the 635")


def _failed_run(tmp_path: Path) -> Path:
    """h100-x1's evidence with one GPU 45% under the median: compute.matmul_tflops_below_median 0.45 failing
    its bound of 0.05, and the run's verdict FAIL."""
    data = load("h100-x1")
    for test in data["tests"]:
        for check in test.get("checks") or []:
            if check["metric"] == "compute.matmul_tflops_below_median":
                check.update(value=0.45, verdict="fail")
                test["outcome"] = "failed"
    data["verdict"] = "FAIL"
    folder = tmp_path / "failed"
    folder.mkdir()
    (folder / "evidence.json").write_text(json.dumps(data))
    return folder


def test_rebaseline_refuses_a_run_that_did_not_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rebaseline", str(_failed_run(tmp_path)), "--all"]) == 4
    err = capsys.readouterr().err
    assert err.startswith("cluster-acceptance rebaseline: ") and "verdict FAIL, not PASS" in err
    assert err.count("\n") == 1


def test_a_failed_fraction_of_the_median_keeps_the_bound_it_ran_with(tmp_path: Path) -> None:
    """Read past the refusal: the bound of a figure that failed is still never looser than the one it had."""
    from acceptance.reports import rebaseline

    data = read_evidence(_failed_run(tmp_path))
    figures = [f for f in rebaseline.chosen(data, None, True) if f.metric == "compute.matmul_tflops_below_median"]
    text = rebaseline.document(data, "failed", figures, rebaseline.tolerances(["0.1"]))
    assert yaml.safe_load(text)["thresholds"]["compute.matmul_tflops_below_median"]["max"] == 0.05
