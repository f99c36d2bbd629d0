"""The drain list built from evidence, and --cluster-drain's commands: argv lists for scontrol and kubectl."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from acceptance.evidence import drain
from acceptance.run import drain as scheduler


def doc(nodes: int = 1, verdict: str = "FAIL", device: str = "cuda", **extra: Any) -> dict[str, Any]:
    return {
        "verdict": verdict,
        "topology": {"host": "gpu-a", "nodes": nodes},
        "profile": {"resolved": {"topology": {"device": device}}},
        "cluster": {"nodes": [{"host": f"gpu-{c}"} for c in "ab"[:nodes]]},
        "tests": [],
        "errors": [],
        **extra,
    }


def failed_check(metric: str, value: float, detail: str) -> dict[str, Any]:
    check = {"metric": metric, "value": value, "bound": ">= 400", "verdict": "fail", "detail": detail}
    return {"nodeid": f"test_x.py::test_{metric}", "outcome": "failed", "checks": [check]}


def test_a_preflight_failure_drains_this_node_with_its_line() -> None:
    data = doc(errors=["preflight: GPU 1 (0000:19:00.0) is in use by another process: pid 4242 `python train.py`"])
    found = drain.build(data, Path("ev/evidence.json"), {"gpu-a": "c1"})
    assert found["nodes"] == [
        {
            "node": "gpu-a",
            "scheduler_name": "c1",
            "gpus": ["1"],
            "severity": "drain",
            "reason": "preflight: GPU 1 (0000:19:00.0) is in use by another process: pid 4242 `python train.py`",
        }
    ]


def test_another_node_s_preflight_drains_that_node_not_this_one() -> None:
    data = doc(nodes=2, errors=["preflight: node 1 (gpu-b) failed its preflight: GPU 0 (0000:18:00.0) missing"])
    data["cluster"]["nodes"] = []  # the run stopped before the connectivity probe listed the nodes
    [node] = drain.build(data, Path("e.json"))["nodes"]
    assert (node["node"], node["gpus"], node["severity"]) == ("gpu-b", ["0"], "drain")


def test_a_figure_that_names_a_node_drains_that_node_only() -> None:
    data = doc(nodes=2, tests=[failed_check("compute.matmul_tflops_min", 212.123456, "slowest: gpu-b GPU 3")])
    [node] = drain.build(data, Path("e.json"))["nodes"]
    assert (node["node"], node["gpus"], node["severity"]) == ("gpu-b", ["3"], "drain")
    assert node["reason"] == "compute.matmul_tflops_min = 212.1, bound >= 400 (slowest: gpu-b GPU 3)"


def test_a_cluster_wide_failure_is_for_review_and_drains_nothing() -> None:
    data = doc(nodes=2, tests=[failed_check("internode.all.all_reduce.busbw_gbps@1G", 12.0, "across 2 nodes")])
    found = drain.build(data, Path("e.json"))
    assert {n["node"] for n in found["nodes"]} == {"gpu-a", "gpu-b"}
    assert {n["severity"] for n in found["nodes"]} == {"review"}
    assert drain.to_drain(found) == []
    assert scheduler.apply(found, "slurm", run=_refuse) == []


def test_other_nodes_verdicts_are_for_review_and_a_cpu_run_names_no_gpu() -> None:
    verdicts = [
        {"host": "gpu-a", "verdict": "FAIL", "evidence": "/r/node0/evidence.json"},
        {"host": "gpu-b", "verdict": "FAIL", "evidence": "/r/node1/evidence.json"},
    ]
    data = doc(nodes=2, device="cpu", cluster={"nodes": [], "node_verdicts": verdicts})
    data["tests"] = [failed_check("connectivity.p2p_min_gbps", 0.001, "gpu-a GPU 1 -> gpu-a GPU 0")]
    nodes = drain.build(data, Path("e.json"))["nodes"]
    assert [(n["node"], n["gpus"], n["severity"]) for n in nodes] == [("gpu-a", [], "drain"), ("gpu-b", [], "review")]
    assert nodes[1]["reason"] == "node verdict FAIL: its drain list is beside /r/node1/evidence.json"


def test_a_pass_lists_no_node_and_reasons_are_one_short_line() -> None:
    assert drain.build(doc(verdict="PARTIAL"), Path("e.json"))["nodes"] == []
    long = drain.one_line("a\nb " + "x" * 500)
    assert "\n" not in long and len(long) == drain.REASON_CHARS and long.endswith("...")


def test_the_list_is_written_once(tmp_path: Path) -> None:
    found = drain.build(doc(errors=["preflight: no GPU"]), tmp_path / "evidence.json")
    path = drain.write(tmp_path, found)
    assert path.name == "drain.json"
    with pytest.raises(FileExistsError, match="already there"):
        drain.write(tmp_path, found)


def _refuse(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    raise AssertionError(f"ran {argv}")


def test_slurm_and_kubernetes_commands_are_argv_lists() -> None:
    found = drain.build(doc(errors=["preflight: GPU 0 in use: pid 7 `x; rm -rf /`"]), Path("e.json"), {"gpu-a": "c1"})
    ran: list[list[str]] = []

    def run(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        ran.append(list(argv))
        return subprocess.CompletedProcess(argv, 0 if argv[0] == "scontrol" else 1, "", "error: forbidden\n")

    lines = scheduler.apply(found, "slurm", run=run)
    reason = "cluster-acceptance: preflight: GPU 0 in use: pid 7 `x; rm -rf /`"
    assert ran == [["scontrol", "update", "nodename=c1", "state=drain", f"reason={reason}"]]
    assert lines == [f"scontrol update nodename=c1 state=drain reason={reason}: ok: error: forbidden"]
    ran.clear()
    lines = scheduler.apply(found, "kubernetes", run=run)
    assert [argv[:3] for argv in ran] == [["kubectl", "taint", "nodes"], ["kubectl", "label", "nodes"],
                                          ["kubectl", "annotate", "nodes"]]  # fmt: skip
    assert ran[0][3:] == ["c1", "cluster-acceptance/verdict=fail:NoSchedule", "--overwrite"]
    assert all(line.endswith("exit 1: error: forbidden") for line in lines)


def test_a_missing_scheduler_is_a_line_not_a_crash() -> None:
    found = drain.build(doc(errors=["preflight: no GPU"]), Path("e.json"))

    def missing(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        raise FileNotFoundError(2, "No such file or directory", argv[0])

    [line] = scheduler.apply(found, "slurm", run=missing)
    assert line.startswith("scontrol update nodename=gpu-a state=drain") and "could not run" in line
