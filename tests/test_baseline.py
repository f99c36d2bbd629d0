"""--cluster-baseline: the regression rule as a gate during the run; the profile's baseline and cost keys.

The end-to-end test slows the loopback network for real (a token-bucket filter on ``lo`` inside a network
namespace, 80 Mbit/s): the profile's bound still holds, the baseline gate fails the run and names the figure.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from acceptance.cli.main import main
from acceptance.evidence.store import read_evidence
from acceptance.profile import loader as profiles
from acceptance.profile.baseline import StoredFigure, change, figures, judge
from acceptance.reports import compare
from acceptance.schema.noise import Noise
from tests.harness import EVIDENCE, ROOT, schema

BASELINE = {
    "compute.matmul_tflops_min": StoredFigure(value=100.0, unit="TFLOP/s", bound=">= 50", verdict="pass"),
    "connectivity.rendezvous_s": StoredFigure(value=1.0, unit="s", bound="", verdict="info"),
    "training.ddp.loss_first": StoredFigure(value=10.0, unit="nats", bound="<= 11", verdict="pass"),
}  # fmt: skip


def test_judge_fails_a_gated_figure_worse_beyond_tolerance() -> None:
    judged = judge(BASELINE, "compute.matmul_tflops_min", 80.0, gated=True, tolerance=0.05)
    assert judged is not None and not judged.ok and judged.baseline_bound == ">= 50"
    assert judged.message == (
        "compute.matmul_tflops_min = 80 TFLOP/s, 20.0% worse than the baseline; needed >= 95 (baseline 100 -5%)"
    )
    ok = judge(BASELINE, "compute.matmul_tflops_min", 96.0, gated=True, tolerance=0.05)
    assert ok is not None and ok.ok and ok.message == ""


def test_judge_applies_only_where_it_can() -> None:
    assert judge(BASELINE, "compute.copy_gbps_min", 1.0, gated=True, tolerance=0.05) is None  # not in the baseline
    assert judge(BASELINE, "connectivity.rendezvous_s", 9.0, gated=False, tolerance=0.05) is None  # info twice
    assert judge(BASELINE, "training.ddp.loss_first", 99.0, gated=True, tolerance=0.05) is None  # no better side
    gated_now = judge(BASELINE, "connectivity.rendezvous_s", 9.0, gated=True, tolerance=0.05)
    assert gated_now is not None and not gated_now.ok  # gated now, information then: judged
    missing = judge(BASELINE, "compute.matmul_tflops_min", None, gated=True, tolerance=0.05)
    assert missing is not None and "not a number" in missing.message


def test_a_fraction_of_the_median_is_judged_in_points() -> None:
    shortfall = {"compute.copy_gbps_below_median": StoredFigure(value=0.0002, unit="fraction", bound="<= 0.05")}
    # from 0.02% to 0.8% under the median: forty times the figure, but 0.8 points, inside 5 points
    noise = judge(shortfall, "compute.copy_gbps_below_median", 0.008, gated=True, tolerance=0.05)
    assert noise is not None and noise.ok
    real = judge(shortfall, "compute.copy_gbps_below_median", 0.0702, gated=True, tolerance=0.05)
    assert real is not None and not real.ok
    assert real.message == (
        "compute.copy_gbps_below_median = 0.0702 fraction, 7.0 pts worse than the baseline; "
        "needed <= 0.0502 (baseline 0.0002 +5 pts)"
    )


def test_the_baseline_s_noise_widens_its_limit() -> None:
    """During the run the figure's own readings are not at hand: the baseline's noise stands for both runs
    (sqrt 2 x its standard error), and a change must exceed 3 of those and the tolerance."""
    noisy = {
        "compute.matmul_tflops_min": replace(BASELINE["compute.matmul_tflops_min"], noise=Noise(0.1, 5, "5 windows"))
    }
    within = judge(noisy, "compute.matmul_tflops_min", 80.0, gated=True, tolerance=0.05)  # ln 1.25 < 3 x 0.141
    assert within is not None and within.ok
    beyond = judge(noisy, "compute.matmul_tflops_min", 60.0, gated=True, tolerance=0.05)
    assert beyond is not None and not beyond.ok
    assert beyond.message == (
        "compute.matmul_tflops_min = 60 TFLOP/s, 40.0% worse than the baseline; "
        "needed >= 65.43 (baseline 100 -5%, noise ±34.6%)"
    )


def test_figures_carry_the_noise_of_their_readings() -> None:
    """Each figure of a stored run with the standard error its readings give (``readings``), or None."""
    found = figures(read_evidence(EVIDENCE / "local-cpu-a"))
    windows = found["collectives.all_reduce.busbw_gbps@8M"].noise
    assert isinstance(windows, Noise) and windows.readings == 5 and "timed windows" in windows.source
    tokens = found["training.ddp.tokens_per_s_per_gpu"].noise
    assert isinstance(tokens, Noise) and tokens.readings == 3
    shortfall, slowest = (found[f"compute.matmul_tflops_{s}"].noise for s in ("below_median", "min"))
    assert isinstance(shortfall, Noise) and isinstance(slowest, Noise)
    assert slowest.standard_error < shortfall.standard_error  # the slowest GPU's and the median's, in points
    assert found["connectivity.barrier_latency_us"].noise is None  # one figure: no readings kept
    assert found["training.ddp.loss_ratio"].noise is None
    older = figures(read_evidence(EVIDENCE / "h200-x2-onejob"))
    quartiles = older["training.zero3.tokens_per_s_per_gpu"].noise
    assert isinstance(quartiles, Noise) and quartiles.source.startswith("the quartiles of")


def test_each_family_that_keeps_readings_carries_its_noise() -> None:
    """A figure's noise comes from its family's descriptor (``Behaviour.noise``), the collectives' included: the
    shared rule names no family."""
    from acceptance.families.collectives import COLLECTIVES

    evidence = read_evidence(EVIDENCE / "local-cpu-a")
    assert COLLECTIVES.behaviour.noise is not None
    windows = COLLECTIVES.behaviour.noise(evidence, ["all_reduce", "busbw_gbps"], "8M")
    assert windows == figures(evidence)["collectives.all_reduce.busbw_gbps@8M"].noise
    assert isinstance(windows, Noise) and windows.readings == 5
    assert COLLECTIVES.behaviour.noise(evidence, ["all_reduce", "wrong"], "8M") is None  # a count: no readings


def test_wall_time_and_temperature_are_left_to_their_bounds() -> None:
    old = {
        "training.zero3.wall_s": StoredFigure(value=17.0, bound="<= 60"),
        "health.temperature_c_max": StoredFigure(value=35.0),
    }
    assert judge(old, "training.zero3.wall_s", 24.0, gated=True, tolerance=0.05) is None
    assert judge(old, "health.temperature_c_max", 38.0, gated=True, tolerance=0.05) is None
    # gone from the new run: its bound (a missing figure fails it) says so, not an infinite change
    gone = change("training.zero3.wall_s", 17.0, None, 0.05)
    assert gone.worse_by == 0 and not gone.beyond and gone.shown == "-"
    canary = change("training.canary.zero3.max_rel_diff", 1e-4, 0.019, 0.05)
    assert canary.scale == "bound" and not canary.beyond  # canary_rtol, far tighter, judges it


def test_two_healthy_h200_runs_differ_by_no_regression() -> None:
    """The same machine twice (the second after a training change): the shortfalls under the median, the
    wall times, the temperature and the ~50 us barrier all moved; under today's h200-x2 profile none of them
    is a regression."""
    old, new = (read_evidence(EVIDENCE / r) for r in ("h200-x2-onejob", "h200-x2-zero3fix"))
    found = compare.rows(old, new, profile=profiles.load("h200-x2").resolved)
    assert [r.change.metric for r in found if r.regression] == []
    shortfall = next(r for r in found if r.change.metric == "compute.h2d_gbps_below_median")
    assert shortfall.change.relative is not None and shortfall.change.relative > 40  # 47 times: relative says so
    assert not shortfall.change.beyond


def test_compare_takes_the_tolerances_of_the_profile_it_is_given(capsys: pytest.CaptureFixture[str]) -> None:
    """The recorded pair judged the barrier at the default 5%, the profile they recorded; today's h200-x2
    allows 60% for it."""
    pair = [str(EVIDENCE / r) for r in ("h200-x2-onejob", "h200-x2-zero3fix")]
    assert main(["compare", *pair]) == 1
    assert "connectivity.barrier_latency_us: 49.47 -> 71.16 us" in capsys.readouterr().out
    assert main(["compare", *pair, "--profile", "h200-x2"]) == 0
    assert (
        "regressions (figures, gated or not, worse beyond tolerance and noise, or turned FAIL by the same bound): 0"
        in capsys.readouterr().out
    )


def test_figures_of_an_evidence_file_by_canonical_name() -> None:
    found = figures(read_evidence(EVIDENCE / "h200-x2"))
    assert found["collectives.all_reduce.busbw_gbps@1G"].value == pytest.approx(332.534, abs=1e-3)


def test_profile_baseline_and_cost_keys(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(
        "name: good\nextends: local-cpu\ncost: {usd_per_gpu_hour: 2.5, source: list price}\n"
        "baseline:\n  tolerance: 0.1\n  tolerances: {collectives.all_reduce.busbw_gbps@8M: 0.3}\n"
    )
    model = profiles.load(str(good)).model
    assert model.cost is not None and model.cost.usd_per_gpu_hour == 2.5
    assert model.baseline.tolerance == 0.1  # extends merges: local-cpu's per-metric tolerances stay beside it
    assert model.baseline.tolerances["collectives.all_reduce.busbw_gbps@8M"] == 0.3
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "name: bad\nextends: local-cpu\nbaseline:\n  tolerances: {collectives.all_reduce.busbw_gbps@2G: 0.3}\n"
    )
    with pytest.raises(profiles.ProfileError, match=r"bad.yaml:4: baseline.tolerances.collectives.all_reduce"):
        profiles.load(str(bad))
    free = tmp_path / "free.yaml"
    free.write_text("name: free\nextends: local-cpu\ncost: {usd_per_gpu_hour: 0}\n")
    with pytest.raises(profiles.ProfileError, match=r"cost.usd_per_gpu_hour: Input should be greater than 0"):
        profiles.load(str(free))


def _netns_unusable() -> str | None:
    if os.geteuid() != 0:
        return "a network namespace needs root"
    if shutil.which("ip") is None or shutil.which("tc") is None:
        return "needs ip and tc (iproute2)"
    return None


@pytest.fixture
def slow_loopback() -> Iterator[list[str]]:
    """argv prefix that runs a command in a fresh network namespace whose loopback moves 80 Mbit/s."""
    why = _netns_unusable()
    if why:
        pytest.skip(why)
    name = f"ca-slow-{uuid.uuid4().hex[:8]}"
    steps = [
        ["ip", "netns", "add", name],
        ["ip", "netns", "exec", name, "ip", "link", "set", "lo", "mtu", "9000", "up"],
        # a burst over the MTU: a packet larger than the bucket would wait forever
        ["ip", "netns", "exec", name, "tc", "qdisc", "add", "dev", "lo", "root", "tbf", "rate", "80mbit", "burst",
         "256kb", "latency", "400ms"],
    ]  # fmt: skip
    try:
        for step in steps:
            done = subprocess.run(step, capture_output=True, text=True)
            if done.returncode != 0:
                pytest.skip(f"cannot slow the loopback down: {' '.join(step)}: {done.stderr.strip()}")
        yield ["ip", "netns", "exec", name]
    finally:
        subprocess.run(["ip", "netns", "delete", name], capture_output=True)


# all_reduce of 1M only: the workload of both runs, small enough for a slow link; a floor the slow run meets
WORKLOAD = [
    "--cluster-set", "thresholds=null", "--cluster-set", "collectives.ops=[all_reduce]",
    "--cluster-set", "collectives.sizes=[1M]",
    "--cluster-set", "thresholds.collectives.all_reduce.busbw_gbps@1M={min: 0.0005, source: any working path}",
]  # fmt: skip


def _suite(tmp_path: Path, folder: str, *extra: str, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    suite = ["tests_cluster/test_collectives.py", "--cluster-evidence", str(tmp_path / folder)]
    argv = [*prefix, sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--cluster-profile", "local-cpu"]
    argv += [*suite, *WORKLOAD, *extra]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, env=env)


@pytest.mark.e2e
def test_a_slower_network_fails_the_baseline_gate(tmp_path: Path, slow_loopback: list[str]) -> None:
    import jsonschema

    base = _suite(tmp_path, "handover")
    assert base.returncode == 0, base.stdout[-3000:] + base.stderr[-3000:]
    before = figures(read_evidence(tmp_path / "handover"))
    metric = "collectives.all_reduce.busbw_gbps@1M"
    # a wide tolerance: only a real slow-down, not the noise of a shared machine, may fail it
    slow = _suite(tmp_path, "rerun", "--cluster-baseline", str(tmp_path / "handover" / "evidence.json"),
                  "--cluster-set", "baseline.tolerance=0.5", prefix=tuple(slow_loopback))  # fmt: skip
    assert slow.returncode == 1, slow.stdout[-3000:] + slow.stderr[-3000:]
    after = json.loads((tmp_path / "rerun" / "evidence.json").read_text())
    jsonschema.validate(after, schema())
    check = next(c for t in after["tests"] for c in t["checks"] if c["metric"] == metric)
    was = before[metric].value
    assert was is not None and check["value"] < was * 0.5  # the link really got slower
    assert check["verdict"] == "baseline_fail" and check["bound"].startswith(">= 0.0005 and >= ")
    assert check["baseline"]["value"] == was and check["baseline"]["tolerance"] == 0.5
    assert after["verdict"] == "FAIL"
    assert f"{metric} = " in slow.stdout and "worse than the baseline; needed >= " in slow.stdout
    assert f"[--cluster-baseline {tmp_path / 'handover' / 'evidence.json'}]" in slow.stdout


@pytest.mark.e2e
def test_a_baseline_that_is_not_evidence_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "x.json").write_text('{"a": 1}')
    done = _suite(tmp_path, "run", "--cluster-baseline", str(tmp_path / "x.json"))
    assert done.returncode == 4
    assert f"--cluster-baseline: {tmp_path / 'x.json'}: not a cluster-acceptance evidence file" in done.stderr
