"""The run's closing lines on recorded evidence: per family how many figures were gated and where their bounds
came from (the profile, init's reference rows and hardware floors, built-in, a baseline), "not judged" for a
family that held nothing, and how many families the verdict judged."""

from __future__ import annotations

from pathlib import Path

from acceptance.evidence.model import EvidenceDoc
from acceptance.plugin.summary import family_lines, summary_lines

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
