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
from acceptance.profile import loader as profiles
from acceptance.profile.baseline import change, tolerance_for
from acceptance.profile.bounds import evaluate, limits
from acceptance.profile.metrics import better
from acceptance.profile.model import Threshold
from acceptance.reports import compare
from tests.harness import EVIDENCE, ROOT


def load(name: str) -> dict[str, Any]:
    return json.loads((EVIDENCE / name / "evidence.json").read_text())


def write(tmp_path: Path, name: str, data: dict[str, Any]) -> str:
    (tmp_path / name).mkdir()
    (tmp_path / name / "evidence.json").write_text(json.dumps(data))
    return str(tmp_path / name)


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


def test_h100_rerun_names_the_zero3_failure_and_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", str(EVIDENCE / "h100-x1"), str(EVIDENCE / "h100-x1-zero3-variance")]) == 1
    out = capsys.readouterr().out
    head = out.split("\n\n")[0]
    assert "old: " in head and ": PASS, profile h100-x1" in head and ": FAIL, profile h100-x1" in head
    zero3 = next(line for line in head.splitlines() if "training.zero3.tokens_per_s_per_gpu" in line)
    assert "22,383 -> 23,571 tokens/s" in zero3 and "verdict PASS -> FAIL against >= 24200" in zero3
    assert "profile thresholds[training.zero3.tokens_per_s_per_gpu].min: 21200.0 -> 24200.0" in head
    table = out.split("\n\n")[1].splitlines()
    assert table[0].split()[:4] == ["metric", "better", "old", "new"]
    flagged = [line.split()[0] for line in table if line.endswith("REGRESSION")]
    assert "training.zero3.tokens_per_s_per_gpu" in flagged and table[2].endswith("REGRESSION")  # worst first
    assert main(["compare", str(EVIDENCE / "h100-x1"), str(EVIDENCE / "h100-x1-zero3-variance"),
                 "--no-fail-on-regression"]) == 0  # fmt: skip


def test_a_run_against_itself_has_no_regression(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", str(EVIDENCE / "h200-x2"), str(EVIDENCE / "h200-x2")]) == 0
    assert "regressions (gated figures worse beyond tolerance, or turned FAIL): 0" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("metric", "factor", "regressed"),
    [
        ("compute.matmul_tflops_min", 0.90, True),  # gated, 10% worse: beyond 5%
        ("compute.matmul_tflops_min", 0.97, False),  # gated, 3% worse: within 5%
        ("compute.matmul_tflops_min", 1.50, False),  # better
        ("collectives.all_reduce.time_us@1M", 1.10, True),  # gated, lower is better, 10% slower
        ("compute.h2d_gbps_median", 0.50, False),  # information: compared, never a regression
    ],
)
def test_regression_is_a_gated_figure_worse_beyond_tolerance(
    tmp_path: Path, metric: str, factor: float, regressed: bool
) -> None:
    new = load("h200-x2")
    set_value(new, metric, factor)
    rows = {r.change.metric: r for r in compare.rows(load("h200-x2"), new)}
    assert rows[metric].regression is regressed
    expected = 1 if regressed else 0
    assert main(["compare", str(EVIDENCE / "h200-x2"), write(tmp_path, "new", new)]) == expected


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
    # the bounds load as a profile and the run they came from meets every one of them
    profile = tmp_path / "rebased.yaml"
    profile.write_text(f"name: rebased\nextends: {ROOT / 'thresholds' / 'h200-x2.yaml'}\n{text}")
    model = profiles.load(str(profile)).model
    measured = {c["metric"]: c["value"] for t in load("h200-x2")["tests"] for c in t["checks"]}
    for metric in bounds:
        assert evaluate(model.thresholds[metric], measured[metric])[0], metric


def test_rebaseline_of_a_profile_s_bounds_only(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rebaseline", str(EVIDENCE / "h100-x1"), "--profile", "h100-x1"]) == 0
    bounds = yaml.safe_load(capsys.readouterr().out)["thresholds"]
    assert set(bounds) <= set(profiles.load("h100-x1").model.thresholds)
    assert bounds["training.zero3.tokens_per_s_per_gpu"]["ref"] == 22383


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
