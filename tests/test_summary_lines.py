"""The run's closing lines on recorded evidence: per family how many figures were gated and where their bounds
came from (the profile, init's reference rows and hardware floors, built-in, a baseline), "not judged" for a
family that held nothing, and how many families the verdict judged."""

from __future__ import annotations

from pathlib import Path

import pytest

from acceptance.evidence.drain import build
from acceptance.evidence.model import EvidenceDoc
from acceptance.plugin.summary import family_lines, next_lines, summary_lines
from tests.harness import doc

EVIDENCE = Path(__file__).resolve().parent / "data" / "evidence" / "h200-x2" / "evidence.json"


def recorded() -> EvidenceDoc:
    return EvidenceDoc.model_validate_json(EVIDENCE.read_text())


def lines_by_family(doc: EvidenceDoc) -> dict[str, str]:
    return {line.split()[0]: line for line, _ in family_lines(doc)}


def test_each_family_says_how_many_figures_are_gated_and_by_what() -> None:
    doc = recorded()
    sources = {
        "collectives.all_reduce.busbw_gbps@1G": "hardware floor: NVLink4 18 links x 25 GB/s = 450 GB/s x 0.3",
        "collectives.all_reduce.busbw_gbps@4G": "reference: 80% of normal for 2x H200 on NVLink (NV18)",
    }
    for test in doc.tests:
        for check in test.checks:
            if check.metric in sources and check.threshold is not None:
                check.threshold["source"] = sources[check.metric]
            if check.metric == "compute.copy_gbps_min":
                check.baseline = {"value": 4200.0}
    lines = lines_by_family(doc)
    assert lines["collectives"].startswith("collectives   PASS         53 figure(s) gated")
    assert lines["collectives"].endswith("bounds: 9 profile, 1 reference row, 1 hardware floor, 42 built-in")
    assert lines["compute"].endswith("bounds: 7 profile, 5 built-in, 1 baseline")
    assert lines["internode"].startswith("internode     skipped ")


def test_a_family_with_nothing_gated_is_not_judged_and_the_verdict_counts_the_judged() -> None:
    doc = recorded()
    assert summary_lines(doc, "ev/evidence.json")[-1][0] == (
        "verdict: PASS; 5 of 6 families judged; evidence: ev/evidence.json"
    )
    for test in doc.tests:
        if "test_health" in test.nodeid:
            for check in test.checks:
                check.verdict = "info"
    assert lines_by_family(doc)["health"].startswith("health        not judged    0 figure(s) gated")
    assert "4 of 6 families judged" in summary_lines(doc, "ev/evidence.json")[-1][0]


CPU_ONLY = (
    "preflight: profile h100-x1 runs on CUDA GPUs (topology.device: cuda), but this torch 2.13.0+cpu is a "
    "CPU-only build: install a CUDA build of torch, or pick a CPU profile such as local-cpu"
)


def cpu_only_run() -> EvidenceDoc:
    """A GPU profile run on a CPU-only torch: the preflight failed (the install's fault), the gate test failed
    with its line, every other test was skipped with it."""
    gate = {"nodeid": "tests_cluster/test_health.py::test_gate[gpu_count]", "outcome": "error", "local": True,
            "message": CPU_ONLY, "category": "software"}  # fmt: skip
    skipped = {"nodeid": "tests_cluster/test_health.py::test_ecc", "outcome": "skipped", "message": "preflight..."}
    return doc(
        verdict="FAIL",
        errors=[CPU_ONLY, "no figure was measured: every selected test was skipped or none ran"],
        tests=[gate, skipped],
        unchecked_thresholds=[f"compute.metric_{n}" for n in range(40)],
        cluster={"nodes": [], "preflight": {"ok": False, "categories": {CPU_ONLY: "software"}}},
    )


def test_a_cpu_only_torch_reads_as_one_story_cause_first() -> None:
    """The first line says the cause and what to do; the drain line and "what next" say the same action
    (fix the install) as the drain list, no other command is suggested, and no list of thresholds that could
    not be checked buries the cause."""
    data = cpu_only_run()
    found = build(data, Path("ev/evidence.json"))
    lines = [line for line, _ in summary_lines(data, "ev/evidence.json", found)]
    assert lines[0] == "cause (fix the install): " + CPU_ONLY.removeprefix("preflight: ")
    [node] = found["nodes"]
    assert node["action"] == "fix the install"
    drain_line = next(line for line in lines if line.startswith("drain: "))
    assert drain_line.startswith("drain: ") and "(review: fix the install)" in drain_line
    what_next = next(line for line in lines if line.startswith("what next: "))
    assert what_next.startswith("what next: fix the install (the cause above), then run again")
    assert "sweep" not in what_next
    assert all(len(line) < 400 for line in lines), [line for line in lines if len(line) >= 400]
    unchecked = next(line for line in lines if line.startswith("thresholds no test checked"))
    assert "40 thresholds" in unchecked and "preflight" in unchecked


def test_what_next_names_the_sweep_only_for_a_failed_collective() -> None:
    failed = {"nodeid": "tests_cluster/test_compute.py::test_matmul", "outcome": "failed", "message": "slow",
              "checks": [{"metric": "compute.matmul_tflops", "verdict": "fail"}]}  # fmt: skip
    lines = [line for line, _ in summary_lines(doc(verdict="FAIL", tests=[failed]), "ev/evidence.json")]
    what_next = next(line for line in lines if line.startswith("what next: "))
    assert "cluster-acceptance report ev" in what_next and "sweep" not in what_next
    failed["checks"] = [{"metric": "collectives.all_reduce.busbw_gbps@1G", "verdict": "fail"}]
    lines = [line for line, _ in summary_lines(doc(verdict="FAIL", tests=[failed]), "ev/evidence.json")]
    assert "`cluster-acceptance sweep`" in next(line for line in lines if line.startswith("what next: "))


@pytest.mark.parametrize(
    ("metric", "hinted"),
    [("collectives.all_reduce.busbw_gbps@1G", True), ("internode.all.all_reduce.busbw_gbps@1G", True),
     ("compute.matmul_tflops_min", False)],
)  # fmt: skip
def test_a_failed_figure_measured_per_size_points_at_the_sweep(metric: str, hinted: bool) -> None:
    data = doc(verdict="FAIL", tests=[{"outcome": "failed", "checks": [{"metric": metric, "verdict": "fail"}]}])
    shown = "\n".join(next_lines(data, "ev/evidence.json", None))
    assert ("`cluster-acceptance sweep` measures the collectives across sizes" in shown) is hinted
