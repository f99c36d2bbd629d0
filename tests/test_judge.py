"""One judge for every figure: its rules, and every figure of earlier runs keeping its name and its verdict.

The earlier runs are a local-cpu run and the last whole suites on one H100 and on 2x H200 before the family
registry (``tests/data/figures``: each check of the run, and the thresholds it ran with). Each of their
checks is judged again by today's ``Judge`` with the thresholds the run recorded: the name must be one the
registry knows, and the verdict the one the run gave.
"""

from __future__ import annotations

import ast
import hashlib
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from acceptance.profile.baseline import StoredFigure
from acceptance.profile.judge import Judge, bound_moved, regressed
from acceptance.profile.loader import Profile
from acceptance.profile.metrics import shape_of
from acceptance.profile.model import ProfileModel
from acceptance.schema.bounds import MUST_BE_ZERO, Threshold
from tests.harness import ROOT

FIGURES = ROOT / "tests" / "data" / "figures"
RUNS = ["local-cpu", "h100-x1", "h200-x2"]


def _profile(name: str, resolved: dict[str, Any]) -> Profile:
    """The run's profile as the judge reads it: its thresholds (the other sections of older evidence may be
    of an older shape, and no verdict reads them)."""
    text = json.dumps(resolved, sort_keys=True)
    model = ProfileModel.model_validate({"name": name, "thresholds": resolved.get("thresholds") or {}})
    return Profile(model, Path(f"{name}.yaml"), resolved, hashlib.sha256(text.encode()).hexdigest(), ())


def _rejudged(profile: Profile, checks: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """(metric, verdict then, verdict now) for each check; a built-in bound the run recorded (a correctness
    figure's ``MUST_BE_ZERO``, the loss that must fall) is the caller's default, as the test passed it."""
    judge = Judge(profile)
    out: list[tuple[str, str, str]] = []
    for check in checks:
        recorded = check.get("threshold")
        default = Threshold.model_validate(recorded) if recorded and not profile.threshold(check["metric"]) else None
        value = float("nan") if check["value"] is None else check["value"]
        out.append((check["metric"], check["verdict"], judge.judge(check["metric"], value, default=default).verdict))
    return out


@pytest.mark.parametrize("run", RUNS)
def test_every_figure_of_an_earlier_run_keeps_its_name_and_verdict(run: str) -> None:
    data = json.loads((FIGURES / f"{run}.json").read_text())
    profile = _profile(data["profile"]["name"], data["profile"]["resolved"])
    found = _rejudged(profile, data["checks"])
    assert len(found) > 90
    assert [m for m, _, _ in found if shape_of(m) is None] == []
    assert [(m, then, now) for m, then, now in found if then != now] == []


def _local(**thresholds: object) -> Profile:
    return _profile("p", {"thresholds": thresholds})


BASELINE: dict[str, StoredFigure] = {
    "compute.matmul_tflops_min": StoredFigure(value=100.0, bound=">= 50"),
    "training.ddp.loss_ratio": StoredFigure(value=0.5, bound="<= 0.99"),
}


def test_the_judge_orders_bound_known_issue_and_baseline() -> None:
    profile = _local(**{"compute.matmul_tflops_min": {"min": 50}, "training.ddp.loss_ratio": {"max": 0.99}})
    plain, against = Judge(profile), Judge(profile, BASELINE, "--cluster-baseline old")
    assert plain.judge("compute.matmul_tflops_min", 80.0).verdict == "pass"
    assert plain.judge("compute.matmul_tflops_min", 40.0).verdict == "fail"
    assert plain.judge("compute.copy_gbps_min", 1.0).verdict == "info"  # no bound: recorded, never passed
    worse = against.judge("compute.matmul_tflops_min", 80.0, "TFLOP/s", "slowest: GPU 1")
    assert worse.verdict == "baseline_fail" and worse.failed
    assert worse.bound == ">= 50 and >= 95 (baseline 100 -5%)"
    assert worse.message.endswith("[--cluster-baseline old]\nslowest: GPU 1")
    assert against.judge("compute.matmul_tflops_min", 97.0).verdict == "pass"
    # correctness is apart from performance: a loss ratio twice the baseline's still passes its own gate
    loss = against.judge("training.ddp.loss_ratio", 0.9)
    assert loss.verdict == "pass" and loss.kind == "correctness" and loss.baseline is None
    known = _local(**{"compute.matmul_tflops_min": {"min": 50, "xfail": "a riser"}})
    assert Judge(known, BASELINE).judge("compute.matmul_tflops_min", 40.0).verdict == "xfail"
    assert not Judge(known, BASELINE).fails("compute.matmul_tflops_min", 40.0)
    assert Judge(profile).judge("collectives.all_reduce.wrong@1M", 3, default=MUST_BE_ZERO).failed


def test_a_metric_s_builtin_bound_applies_where_the_profile_sets_none() -> None:
    """Declared once, in the metric (``Metric.builtin``): a correctness count must be 0, a canary within
    ``training.canary_rtol``, a GPU within ``compute.tolerance`` of the median; the profile's bound wins."""
    judge = Judge(_local())
    wrong = judge.judge("collectives.all_reduce.wrong@1M", 3)
    assert wrong.failed and wrong.threshold == MUST_BE_ZERO
    assert judge.judge("collectives.all_reduce.wrong@1M", 0).verdict == "pass"
    canary = judge.judge("training.canary.fsdp.max_rel_diff", 0.5)
    assert canary.failed and canary.threshold is not None and canary.threshold.source == "training.canary_rtol"
    below = judge.bound("compute.matmul_tflops_below_median")
    assert below is not None and below.max == 0.10 and (below.source or "").startswith("compute.tolerance")
    assert judge.judge("training.ddp.loss_ratio", 1.0).failed  # the loss must fall
    assert judge.judge("collectives.all_reduce.busbw_gbps@1M", 0.0).verdict == "info"  # no bound: information
    loose = Judge(_local(**{"collectives.all_reduce.wrong@1M": {"max": 5}}))
    assert loose.judge("collectives.all_reduce.wrong@1M", 3).verdict == "pass"


def test_a_figure_over_part_of_the_units_fails_whatever_its_bound() -> None:
    """``unmeasured`` (a GPU that could not measure what the others did, a case the probe never measured)
    fails the figure in the judge: a passing value, a known issue and information alike."""
    profile = _local(**{"compute.matmul_tflops_min": {"min": 50, "xfail": "a riser"}})
    judge = Judge(profile)
    why = "GPU 3 (node a): fp8 GEMM failed"
    for metric, value in (("compute.matmul_tflops_min", 80.0), ("compute.matmul_tflops_min", 40.0), ("x.y", 1.0)):
        judged = judge.judge(metric, value, "TFLOP/s", "slowest: GPU 1", unmeasured=why)
        assert judged.verdict == "fail"
        assert judged.message.splitlines()[1:] == ["slowest: GPU 1", why]
    passing = judge.judge("compute.matmul_tflops_min", 80.0, "TFLOP/s", unmeasured=why).message
    assert passing == f"compute.matmul_tflops_min = 80 TFLOP/s, measured over part of the units only\n{why}"
    assert "[known issue: a riser]" in judge.judge("compute.matmul_tflops_min", 40.0, unmeasured=why).message
    assert judge.judge("compute.matmul_tflops_min", 80.0, unmeasured=None).verdict == "pass"
    assert judge.judge("compute.matmul_tflops_min", 80.0, unmeasured="").verdict == "pass"


TESTS_CLUSTER = ROOT / "tests_cluster"


def test_no_cluster_test_decides_beside_the_judge() -> None:
    """A cluster test records figures and lets the judge decide: no bare ``assert``, no ``AssertionError``,
    and ``pytest.fail`` only for a probe that returned an error instead of figures."""
    found = []
    for path in sorted(TESTS_CLUSTER.glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            where = f"{path.name}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Assert):
                found.append(f"{where}: assert")
            if isinstance(node, ast.Raise) and "AssertionError" in ast.unparse(node):
                found.append(f"{where}: raise AssertionError")
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "pytest.fail":
                text = ast.unparse(node.args[0]) if node.args else ""
                if "error" not in text and "exc" not in text:
                    found.append(f"{where}: {ast.unparse(node)}")
    assert found == []


# the primitives that compare a figure with a bound or a baseline, and the one module allowed to call them
PRIMITIVES = {"evaluate", "judge"}
PRIMITIVE_MODULES = {"acceptance.schema.bounds", "acceptance.profile.baseline"}
JUDGE = ROOT / "acceptance" / "profile" / "judge.py"


def _calls_of_primitives(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    imported: set[str] = set()
    modules: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in PRIMITIVE_MODULES:
            imported |= {a.asname or a.name for a in node.names if a.name in PRIMITIVES}
        if isinstance(node, ast.ImportFrom) and node.module == "acceptance.profile":
            modules |= {a.asname or a.name for a in node.names if a.name in ("bounds", "baseline")}
    found = []
    for call in (node for node in ast.walk(tree) if isinstance(node, ast.Call)):
        func, where = call.func, f"{path.relative_to(ROOT)}:{call.lineno}"
        if isinstance(func, ast.Name) and func.id in imported:
            found.append(f"{where}: {func.id}")
        on_module = isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in modules
        if on_module and isinstance(func, ast.Attribute) and func.attr in PRIMITIVES:
            found.append(f"{where}: {ast.unparse(func)}")
    return found


def test_one_function_decides_a_figure_s_verdict() -> None:
    """Nothing but the judge compares a figure with a bound or with a baseline run."""
    paths = [*sorted((ROOT / "acceptance").rglob("*.py")), *sorted((ROOT / "tests_cluster").rglob("*.py"))]
    found = [call for path in paths if path != JUDGE for call in _calls_of_primitives(path)]
    assert found == []
    assert _calls_of_primitives(JUDGE)  # and the judge does


def test_compare_regresses_by_the_judge_s_rules() -> None:
    """Two stored runs: a gated figure that turned FAIL regressed; a performance figure worse beyond the
    tolerance regressed; a correctness figure that held its gate did not, however its value moved."""
    old = StoredFigure(value=100.0, bound=">= 50", verdict="pass")
    assert regressed("compute.matmul_tflops_min", old, replace(old, value=90.0), 0.05)
    assert not regressed("compute.matmul_tflops_min", old, replace(old, value=97.0), 0.05)
    assert regressed("compute.matmul_tflops_min", old, replace(old, value=40.0, verdict="fail"), 0.5)
    worse = replace(old, verdict="baseline_fail")  # worse than its baseline then, out of its bound now
    assert regressed("compute.matmul_tflops_min", worse, replace(old, value=98.5, verdict="fail"), 0.05)
    loss = StoredFigure(value=0.5, bound="<= 0.99", verdict="pass")
    assert not regressed("training.ddp.loss_ratio", loss, replace(loss, value=0.9), 0.05)
    info = StoredFigure(value=100.0, bound="", verdict="info")
    assert not regressed("compute.copy_gbps_min", info, replace(info, value=10.0), 0.05)  # noise not known


def test_an_ungated_figure_regresses_beyond_its_noise_unless_gated_only() -> None:
    """A figure no bound gates, measured with its noise, regressed when worse beyond tolerance and noise;
    ``gated_only`` restores the gated figures alone; an ungated correctness record never regresses."""
    info = StoredFigure(value=100.0, bound="", verdict="info")
    metric = "collectives.all_reduce.busbw_gbps@1G"
    assert regressed(metric, info, replace(info, value=7.0), 0.05, noise=0.01)
    assert not regressed(metric, info, replace(info, value=7.0), 0.05, noise=0.01, gated_only=True)
    assert not regressed(metric, info, replace(info, value=98.0), 0.05, noise=0.01)  # within tolerance
    assert not regressed(metric, info, replace(info, value=90.0), 0.05, noise=0.2)  # within noise
    assert not regressed("connectivity.world_size", info, replace(info, value=1.0), 0.05, noise=0.01)


def test_a_moved_bound_is_not_a_regression_of_the_figure() -> None:
    """A figure that fails a bound the old run did not have regressed only if its value did."""
    metric = "compute.matmul_tflops_min"
    old = StoredFigure(value=100.0, bound=">= 50", verdict="pass", threshold={"min": 50.0, "source": "then"})
    new = StoredFigure(value=104.0, bound=">= 110", verdict="fail", threshold={"min": 110.0, "source": "now"})
    assert bound_moved(old, new) and not regressed(metric, old, new, 0.05)
    assert regressed(metric, old, replace(new, value=60.0), 0.05)  # the value fell beyond its tolerance too
    resourced = replace(old, threshold={"min": 50.0, "source": "another words"})
    assert not bound_moved(old, resourced)  # the same bound, sourced anew
    assert regressed(metric, old, replace(resourced, value=40.0, verdict="fail"), 0.5)


def test_a_correctness_figure_that_went_bad_regressed_though_its_bound_moved() -> None:
    """A correctness count out of its bound and worse, or out of the bound the old run met, regressed even
    where the bound moved; a tightened bound that the same value now fails is the bound's change."""
    metric = "soak.gemm_wrong_elements"
    old = StoredFigure(value=0, bound="<= 5", verdict="pass", threshold={"max": 5})
    new = StoredFigure(value=4000, bound="<= 0", verdict="fail", threshold={"max": 0})
    assert bound_moved(old, new) and regressed(metric, old, new, 0.05)
    loosened = StoredFigure(value=3, bound="<= 5", verdict="pass", threshold={"max": 5})
    assert regressed(metric, replace(old, bound="<= 0", threshold={"max": 0}), loosened, 0.05)  # out of the old
    same = replace(old, value=3)
    assert not regressed(metric, same, replace(new, value=3), 0.05)  # 3 as before: only the bound tightened
    assert not regressed(metric, old, replace(old, value=2), 0.05)  # within the same gate: no regression


def test_a_change_within_the_noise_is_no_regression() -> None:
    metric = "compute.matmul_tflops_min"
    old = StoredFigure(value=100.0, bound=">= 50", verdict="pass")
    worse = replace(old, value=80.0)  # 20% worse: beyond 5%
    assert regressed(metric, old, worse, 0.05)  # no readings: the tolerance alone
    assert not regressed(metric, old, worse, 0.05, noise=0.1)  # ln 1.25 = 0.22 < 3 x 0.1
    assert regressed(metric, old, worse, 0.05, noise=0.05)
