"""The reference workload end to end on local-cpu: opt-in (a plain run leaves it out), ``-m llama8b`` runs
the tiny Llama-3.1-8B config under FSDP2 and ZeRO-3 over gloo, through the same probe and figures as on
GPUs, and passes; each figure says how many of the shape's layers ran."""

from __future__ import annotations

import pytest

from tests.harness import PLUGIN_ARGS, collected, evidence

RUN_TIMEOUT_S = 600  # only so that a broken launcher cannot hang CI (DeepSpeed's CPU op may build first)
LLAMA8B_TESTS = 12  # tests_cluster/test_llama8b.py's 6 tests for each of the 2 strategies


def _collected(suite: pytest.Pytester, *args: str) -> list[str]:
    return collected(suite, *args, timeout=RUN_TIMEOUT_S)


@pytest.mark.e2e
def test_a_plain_run_leaves_the_workload_out_and_its_marker_or_the_burn_in_selects_it(suite: pytest.Pytester) -> None:
    plain = _collected(suite, "tests_cluster/")
    assert plain and not [n for n in plain if "test_llama8b.py" in n]
    asked = _collected(suite, "-m", "llama8b", "tests_cluster/")
    assert len(asked) == LLAMA8B_TESTS and all("test_llama8b.py" in n for n in asked)
    burn_in = _collected(suite, "--cluster-tier", "burn-in", "tests_cluster/")
    assert len([n for n in burn_in if "test_llama8b.py" in n]) == LLAMA8B_TESTS


@pytest.mark.e2e
def test_the_workload_trains_under_fsdp2_and_zero3_on_local_cpu(suite: pytest.Pytester) -> None:
    folder = suite.path / "evidence"
    result = suite.runpytest_subprocess(
        *PLUGIN_ARGS, "-p", "no:cacheprovider", "--cluster-evidence", str(folder), "--cluster-profile", "local-cpu",
        "-m", "llama8b", "tests_cluster/", timeout=RUN_TIMEOUT_S,
    )  # fmt: skip
    outcomes = result.parseoutcomes()
    outcomes.pop("deselected")
    # skipped: MFU (no peak on the CPU); the figures with no bound on local-cpu are recorded as information
    assert outcomes.get("failed", 0) == 0 and outcomes.get("skipped") == 2, result.stdout.str()
    checks = {c["metric"]: c for t in evidence(folder)["tests"] for c in t.get("checks") or []}
    for strategy in ("fsdp", "zero3"):
        assert checks[f"llama8b.{strategy}.loss_ratio"]["verdict"] == "pass"
        assert checks[f"llama8b.{strategy}.tokens_per_s_per_gpu"]["value"] > 0
        assert checks[f"llama8b.{strategy}.layers"]["value"] == 4
        assert "all 4 decoder layers" in checks[f"llama8b.{strategy}.tokens_per_s_per_gpu"]["detail"]
