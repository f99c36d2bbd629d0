"""The soak family end to end on local-cpu: opt-in (a plain run leaves it out), ``-m soak`` passes in seconds,
and a corrupted GEMM result and a slowed rank (``ACCEPTANCE_TEST_SOAK``) fail the run, each named by rank, on
one node and on two loopback nodes soaking at once; a soak whose rank is killed part-way fails, judged on its
last checkpoint."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest

from acceptance.families import soak as rules
from acceptance.probes.soak import FAULT_ENV, PARTIAL
from tests.harness import PLUGIN_ARGS, collected, evidence, free_port
from tests.test_multinode import run_nodes

RUN_TIMEOUT_S = 300  # only so that a broken launcher cannot hang CI; nothing here measures speed
SOAK_TESTS = 13  # tests_cluster/test_soak.py's test cases, parametrized ones counted


def _soak(suite: pytest.Pytester, *args: str, duration_s: float = 2) -> pytest.RunResult:
    folder = suite.path / "evidence"
    return suite.runpytest_subprocess(
        *PLUGIN_ARGS, "-p", "no:cacheprovider", "--cluster-evidence", str(folder), "--cluster-profile", "local-cpu",
        "--cluster-set", f"soak.duration_s={duration_s:g}", *args, "tests_cluster/", timeout=RUN_TIMEOUT_S,
    )  # fmt: skip


def _collected(suite: pytest.Pytester, *args: str) -> list[str]:
    return collected(suite, *args, timeout=RUN_TIMEOUT_S)


@pytest.mark.e2e
def test_a_plain_run_leaves_the_soak_out_and_m_soak_selects_it(suite: pytest.Pytester) -> None:
    plain = _collected(suite, "tests_cluster/")
    assert plain and not [n for n in plain if "test_soak.py" in n]
    assert any("test_compute.py" in n for n in plain)
    asked = _collected(suite, "-m", "soak", "tests_cluster/")
    assert len(asked) == SOAK_TESTS and all("test_soak.py" in n for n in asked)
    assert len(_collected(suite, "tests_cluster/test_soak.py")) == SOAK_TESTS  # its module, named
    burn_in = _collected(suite, "--cluster-tier", "burn-in", "tests_cluster/")  # a tier that includes it
    assert len([n for n in burn_in if "test_soak.py" in n]) == SOAK_TESTS and len(burn_in) > len(plain)


@pytest.mark.e2e
def test_the_soak_passes_on_local_cpu(suite: pytest.Pytester) -> None:
    result = _soak(suite, "-m", "soak")
    outcomes = result.parseoutcomes()
    outcomes.pop("deselected")  # the other families' tests
    # skipped: NVML's counts (3 tests) and slowdowns, the fp8 speed, the steady state: GPU figures;
    # test_every_rank_soaked passes its gate soak.completed_fraction (its wall time is information)
    assert outcomes == {"passed": 7, "skipped": 6}, result.stdout.str()
    data = evidence(suite.path / "evidence")
    soak = next(p["result"] for p in data["probes"] if p["name"] == "soak")
    assert [r["rank"] for r in soak["ranks"]] == [0, 1]
    # the evidence holds the probe's result in the shape of its TypedDicts (the schema's soak part)
    assert set(soak) - {"wall_s"} == rules.SoakResult.__required_keys__
    assert all(set(r) == rules.RankSoak.__required_keys__ for r in soak["ranks"])
    assert all(set(g) == rules.GemmRecord.__required_keys__ for r in soak["ranks"] for g in r["gemm"])
    for r in soak["ranks"]:
        bf16 = r["gemm"][0]
        assert bf16["calls"] > 1 and bf16["wrong_elements"] == 0 and bf16["windows"]
        assert r["memory"]["passes"] == r["allreduce"]["iterations"] == r["rounds"] > 0
        assert r["seconds"] >= 2
    assert soak["ranks"][0]["gemm"][0]["digest"] == soak["ranks"][1]["gemm"][0]["digest"]


@pytest.mark.e2e
def test_a_corrupted_result_and_a_slowed_rank_fail_named_by_rank(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(FAULT_ENV, "gemm@1;slow@0:0.2")
    result = _soak(suite, "-m", "soak")
    assert result.ret == 1, result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "soak.gemm_wrong_elements = 1 elements, expected == 0 (profile local-cpu)",
            "node 0 (*) rank 1 (cpu): bfloat16: 1 wrong element(s) in 1 of * results; first at element *: got *",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "soak.bf16_tflops_below_median = * fraction, expected <= 0.5 (profile local-cpu)",
            "node 0 (*) rank 0 (cpu) * TFLOP/s, *% under the median *",
        ]
    )
    result.stdout.fnmatch_lines(["verdict: FAIL*"])
    tests = {t["nodeid"].split("::")[1]: t for t in evidence(suite.path / "evidence")["tests"]}
    assert tests["test_every_rank_soaked"]["measurements"]["injected"] == [
        "rank 0: GEMM batches held to 0.2 of their speed",
        "rank 1: one element of its second bfloat16 result flipped",
    ]


@pytest.mark.e2e
def test_two_nodes_soak_at_once_and_each_names_the_rank_that_computed_wrong(tmp_path: Path) -> None:
    common = {"NNODES": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), FAULT_ENV: "gemm@1"}
    envs = [{**common, "NODE_RANK": str(r)} for r in range(2)]
    suite = ["-m", "soak", "tests_cluster/", "--cluster-set", "topology.ranks_per_node=1"]
    suite += ["--cluster-set", "soak.duration_s=2"]
    nodes = run_nodes(tmp_path, envs, suite=suite)
    host = re.escape(socket.gethostname())
    for each in nodes:  # each node's pytest judges the whole cluster
        assert each.returncode == pytest.ExitCode.TESTS_FAILED, each.output[-6000:]
        assert re.search(
            rf"soak\.gemm_wrong_elements = 1 elements, expected == 0 \(profile local-cpu\)\n"
            rf"node 1 \({host}\) rank 1 \(cpu\): bfloat16: 1 wrong element\(s\) in 1 of \d+ results",
            each.output,
        )
        soak = next(p["result"] for p in each.evidence()["probes"] if p["name"] == "soak")
        assert [(r["node_rank"], r["rank"]) for r in soak["ranks"]] == [(0, 0), (1, 1)]
        assert soak["ranks"][0]["allreduce"]["iterations"] == soak["ranks"][1]["allreduce"]["iterations"] > 0


@pytest.mark.e2e
def test_a_soak_stopped_part_way_fails_judged_on_its_last_checkpoint(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rank 1 computes one wrong element early, and is killed at 6 of 30 s: the checkpoints every second
    keep what the ranks measured, the wrong element is named from them, and the stop fails the run."""
    monkeypatch.setenv(FAULT_ENV, "gemm@1;kill@1:0.2")
    result = _soak(suite, "-m", "soak", "--cluster-set", "soak.checkpoint_s=1", duration_s=30)
    assert result.ret == 1, result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "soak.gemm_wrong_elements = 1 elements, expected == 0 (profile local-cpu)",
            "node 0 (*) rank 1 (cpu): bfloat16: 1 wrong element(s) in 1 of * results; first at element *: got *",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "soak.completed_fraction = * fraction, expected >= 1 (profile local-cpu)",
            "the soak stopped at * of 30 s: its figures are those of its last checkpoint (soak.checkpoint_s 1 s)",
            "soak stopped after * of 30 s: *",
        ]
    )
    result.stdout.fnmatch_lines(["verdict: FAIL*"])
    data = evidence(suite.path / "evidence")
    record = next(p for p in data["probes"] if p["name"] == "soak")
    assert record["status"] == "failed"
    assert (suite.path / "evidence" / record["out_dir"] / PARTIAL).is_file()
    found = record["result"]  # the last checkpoint, as the runner read it back
    assert found["complete"] is False and 1 <= found["soaked_s"] < 30
    assert [r["rank"] for r in found["ranks"]] == [0, 1]
    assert "rank 1: SIGKILLed at 0.2 of the soak's duration" in found["injected"]
    tests = {t["nodeid"].split("::")[1]: t for t in data["tests"]}
    whole = next(c for c in tests["test_every_rank_soaked"]["checks"] if c["metric"] == "soak.completed_fraction")
    assert whole["verdict"] == "fail" and whole["value"] < 1
