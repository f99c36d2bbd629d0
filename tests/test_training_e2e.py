"""The training tests end to end on local-cpu: real torchrun jobs, one small strategy set per run.

Each run keeps to one or two strategies and skips the scaling baseline, so it costs seconds on two cores;
the strategies of a run share one job, and a strategy that fails takes only itself down.
"""

from __future__ import annotations

import json
import os
import shutil
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest

from tests.harness import counts

pytestmark = pytest.mark.e2e  # every test here starts pytest processes that start torchrun

ROOT = Path(__file__).resolve().parent.parent
INSTALLED = any(ep.value == "acceptance.plugin" for ep in entry_points(group="pytest11"))
PLUGIN_ARGS: tuple[str, ...] = () if INSTALLED else ("-p", "acceptance.plugin")
RUN_TIMEOUT_S = 400  # only so that a broken launcher cannot hang CI (DeepSpeed's first CPU run builds an op)
# the profile's own bounds belong to other probes; these runs bound only what they test
SMALL = (
    "--cluster-set",
    "thresholds=null",
    "--cluster-set",
    "training.scaling_baseline=none",
    "--cluster-set",
    "training.steps=4",
)


@pytest.fixture
def suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    shutil.copytree(ROOT / "tests_cluster", pytester.path / "tests_cluster")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    monkeypatch.delenv("CLUSTER_PROFILE", raising=False)
    # DeepSpeed's CPU op (built once, about a minute) is cached in this environment, not under pytester's HOME
    return pytester


def run(suite: pytest.Pytester, *sets: str, tests: str = "") -> tuple[pytest.RunResult, dict[str, Any]]:
    folder = suite.path / "evidence"
    args = [a for s in sets for a in ("--cluster-set", s)]
    result = suite.runpytest_subprocess(
        *PLUGIN_ARGS,
        "-p",
        "no:cacheprovider",
        "--cluster-profile",
        "local-cpu",
        "--cluster-evidence",
        str(folder),
        *SMALL,
        *args,
        f"tests_cluster/test_training.py{tests}",
        timeout=RUN_TIMEOUT_S,
    )
    return result, json.loads((folder / "evidence.json").read_text())


def outcome(data: dict[str, Any], nodeid_end: str) -> dict[str, Any]:
    return next(t for t in data["tests"] if t["nodeid"].endswith(nodeid_end))


def test_tokens_bound_fails_with_the_figure(suite: pytest.Pytester) -> None:
    result, data = run(
        suite, "training.strategies=[ddp]", "thresholds={training.ddp.tokens_per_s_per_gpu: {min: 1.0e+12}}"
    )
    # skipped: mfu and GPU utilisation (no GPU), scaling (no baseline), canary (one strategy: nothing to compare);
    # recorded: the figures this profile does not bound
    assert counts(result) == {"failed": 1, "passed": 1, "recorded": 5, "skipped": 4}
    result.stdout.fnmatch_lines(
        [
            "training.ddp.tokens_per_s_per_gpu = * tokens/s, expected >= 1e+12 (profile local-cpu, --cluster-set *)",
            "*FAILED tests_cluster/test_training.py::test_tokens_per_s[[]ddp[]]*",
        ]
    )
    test = outcome(data, "test_tokens_per_s[ddp]")
    assert test["outcome"] == "failed"
    assert "ddp tiny fp32 on 2 rank(s)" in test["message"]  # the run's summary comes with the verdict
    assert "median of 3 timed windows (4 steps): IQR" in test["message"]  # and the figure's spread
    assert "clock events: no GPU" in test["message"]
    assert data["verdict"] == "FAIL"
    # live progress: the job's start and end, and the strategy as it finished
    result.stdout.fnmatch_lines(
        [
            "[[]cluster[]] training: started (training probe on 1 node(s) x 2 rank(s), timeout * s)",
            "[[]cluster[]] training: ddp ok in * s",
            "[[]cluster[]] training: ok in * s",
        ]
    )


def test_loss_that_does_not_fall_fails(suite: pytest.Pytester) -> None:
    result, data = run(suite, "training.strategies=[ddp]", "training.lr=0")
    assert counts(result) == {"failed": 1, "recorded": 6, "skipped": 4}
    result.stdout.fnmatch_lines(
        [
            "training.ddp.loss_ratio = * last/first, expected <= 0.99 (profile local-cpu)",
            "*FAILED tests_cluster/test_training.py::test_loss_falls[[]ddp[]]*",
        ]
    )
    assert "a run that does not learn is broken" in outcome(data, "test_loss_falls[ddp]")["message"]


def test_user_deepspeed_config_auto_resolved_and_canary(suite: pytest.Pytester) -> None:
    tuned = (
        "{base: zero2, config: {train_micro_batch_size_per_gpu: auto, zero_optimization: {reduce_bucket_size: auto}}}"
    )
    result, data = run(suite, "training.strategies=[ddp, tuned]", f"training.deepspeed={{tuned: {tuned}}}")
    assert counts(result) == {"passed": 3, "recorded": 12, "skipped": 5}
    assert result.ret == 0
    assert [p["key"] for p in data["probes"]] == ["training"]  # both strategies in one job
    run_result = data["probes"][0]["result"]["strategies"]["tuned"]
    assert run_result["deepspeed_auto_resolved"] == {
        "train_micro_batch_size_per_gpu": 4,
        "zero_optimization.reduce_bucket_size": 128 * 128,  # hidden size squared, transformers' rule
    }
    assert run_result["deepspeed_config"]["zero_optimization"]["stage"] == 2
    canary = outcome(data, "test_canary[tuned]")
    assert canary["measurements"]["curves"]["ddp"] and canary["measurements"]["curves"]["tuned"]
    assert canary["checks"][0]["metric"] == "training.canary.tuned.max_rel_diff"


def test_a_strategy_that_raises_on_every_rank_fails_alone_in_the_shared_job(suite: pytest.Pytester) -> None:
    """DeepSpeed refuses the config on every rank: the error is that strategy's, and ddp after it still runs
    in the same job."""
    bad = "{bad: {base: zero2, config: {optimizer: {type: AdamW}}}}"
    result, data = run(suite, "training.strategies=[bad, ddp]", f"training.deepspeed={bad}", tests="::test_loss_falls")
    result.assert_outcomes(failed=1, passed=1)
    message = outcome(data, "test_loss_falls[bad]")["message"]
    assert "training bad: bad failed on rank(s) 0, 1: rank 0 raised DeepSpeedConfigError" in message
    assert "Remove the optimizer section" in message
    assert outcome(data, "test_loss_falls[ddp]")["outcome"] == "passed"
    assert [p["key"] for p in data["probes"]] == ["training"]
    result.stdout.fnmatch_lines(["[[]cluster[]] training: bad failed in * s", "[[]cluster[]] training: ddp ok in * s"])


def test_a_rank_that_crashes_alone_fails_its_strategy_and_the_next_job_runs_the_rest(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rank 1 raises in fsdp while rank 0 goes on into a collective: the job ends, fsdp fails with rank 1's
    error, and ddp, after fsdp, runs in a new job."""
    monkeypatch.setenv("ACCEPTANCE_TEST_FAULT", "crash@1:fsdp: wrap")
    result, data = run(suite, "training.strategies=[fsdp, ddp]", tests="::test_loss_falls")
    result.assert_outcomes(failed=1, passed=1)
    message = outcome(data, "test_loss_falls[fsdp]")["message"]
    assert "rank 1 (host" in message and "RuntimeError: injected crash on rank 1" in message
    assert outcome(data, "test_loss_falls[ddp]")["outcome"] == "passed"
    first, second = data["probes"]
    assert [(first["key"], first["status"]), (second["key"], second["status"])] == [
        ("training", "failed"),
        ("training-2", "ok"),
    ]
    assert list(second["result"]["strategies"]) == ["ddp"]


def test_the_scaling_baseline_runs_in_the_strategies_job(suite: pytest.Pytester) -> None:
    """The one-GPU baseline is a part of the ddp job, on a process group of rank 0 alone: one torchrun job."""
    result, data = run(
        suite, "training.strategies=[ddp]", "training.scaling_baseline=one_gpu", tests="::test_scaling_efficiency"
    )
    assert counts(result) == {"recorded": 1}  # the scaling efficiency, unbounded here
    assert [p["key"] for p in data["probes"]] == ["training"]
    parts = data["probes"][0]["result"]["strategies"]
    assert list(parts) == ["ddp", "scaling-baseline"]
    assert parts["ddp"]["world_size"] == 2 and parts["scaling-baseline"]["world_size"] == 1
    assert list(parts["scaling-baseline"]["by_node"]) == ["0"]
    # each rank's memory when ddp began, which its peak counts: a number per rank (the resident set on the CPU)
    assert [isinstance(v, float) and v > 0 for v in parts["ddp"]["held_at_start_gib"]] == [True, True]
    check = outcome(data, "test_scaling_efficiency")["checks"][0]
    assert check["metric"] == "training.scaling_efficiency" and check["value"] > 0
    result.stdout.fnmatch_lines(["[[]cluster[]] training: scaling-baseline ok in * s"])


def test_a_baseline_that_fails_fails_scaling_alone(suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """The baseline's rank raises while the other rank waits outside it: scaling fails with the baseline's
    error, ddp's own figures stand, and the job ends cleanly."""
    monkeypatch.setenv("ACCEPTANCE_TEST_FAULT", "crash@0:scaling-baseline: wrap")
    result, data = run(
        suite,
        "training.strategies=[ddp, fsdp]",
        "training.scaling_baseline=one_gpu",
        tests="::test_scaling_efficiency",
    )
    result.assert_outcomes(failed=1)
    message = outcome(data, "test_scaling_efficiency")["message"]
    assert "the scaling baseline (one GPU (one rank)) failed: scaling-baseline failed on rank(s) 0" in message
    assert "injected crash on rank 0" in message
    assert [p["key"] for p in data["probes"]] == ["training"]
    parts = data["probes"][0]["result"]["strategies"]
    assert "error" not in parts["ddp"] and list(parts) == ["ddp", "scaling-baseline"]
