"""The report: the verdict as the model defines it, figures once each (merged files too), series without
zigzags, pair matrices of any shape, the one table renderer, the HTML and Markdown writers."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any, cast

import pytest

from acceptance.cli.main import main
from acceptance.cli.reports import load
from acceptance.evidence.model import EvidenceDoc
from acceptance.evidence.store import read_evidence
from acceptance.evidence.verdict import verdict_of
from acceptance.families.collectives import CollectiveRow
from acceptance.families.collectives import report as measured
from acceptance.families.training import report as training
from acceptance.reports import html, overview, pairs, plots, summary, view
from acceptance.reports.blocks import Block, Heading
from acceptance.reports.table import Raw, render
from tests.harness import EVIDENCE, ROOT, doc

H200 = EVIDENCE / "h200-x2"
TWO_NODES = EVIDENCE / "h200-x2-2node"


def evidence(folder: Path) -> EvidenceDoc:
    return read_evidence(folder)


@pytest.fixture(scope="module")
def h200_blocks() -> list[Block]:
    """The H200 run's report, plots included, drawn once for the tests that read it (drawing is most of a
    report's time)."""
    return overview.blocks(evidence(H200), "tests/data/evidence/h200-x2")


MEASURED = [{"outcome": "passed", "checks": [{"metric": "connectivity.world_size", "verdict": "pass"}]}]


@pytest.mark.parametrize(
    ("fields", "shown"),
    [
        ({"verdict": "PASS", "complete": True}, "PASS"),
        ({"verdict": "PASS", "complete": True, "partial": True}, "PARTIAL"),
        ({"verdict": "PASS", "complete": False}, "INCOMPLETE"),
        ({"verdict": "FAIL", "complete": True}, "FAIL"),
        ({"verdict": "FAIL", "complete": False}, "INCOMPLETE"),
        ({"verdict": "FAIL", "complete": False, "errors": ["node 1 missing"]}, "FAIL"),
        ({"verdict": "PARTIAL", "complete": True}, "PARTIAL"),
        ({"verdict": "INCOMPLETE", "complete": False}, "INCOMPLETE"),
        ({"complete": True}, "FAIL"),
    ],
)
def test_verdict_never_pass_for_a_subset_or_an_interruption(fields: dict[str, Any], shown: str) -> None:
    assert verdict_of(doc(**fields, tests=MEASURED)) == shown


def test_partial_run_report_does_not_open_with_pass(tmp_path: Path, no_plots: None) -> None:
    data = json.loads((H200 / "evidence.json").read_text())
    data["partial"], data["unchecked_thresholds"] = True, ["training.ddp.mfu"]
    (tmp_path / "evidence.json").write_text(json.dumps(data))
    assert main(["report", str(tmp_path)]) == 0
    text = (tmp_path / "report.md").read_text()
    assert text.startswith("# Cluster acceptance: PARTIAL\n") and "training.ddp.mfu" in text.split("\n\n")[1]
    page = (tmp_path / "report.html").read_text()
    banner = page.split("<body>")[1].split("<dl")[0]
    assert '<div class="banner v-PARTIAL">' in banner and "PASS" not in banner


def test_merged_nodes_give_each_figure_once() -> None:
    merged, _ = load(TWO_NODES)
    one = evidence(TWO_NODES / "node0-vm")
    figures = view.figures(merged)
    assert len(figures) == len(view.figures(one)) == sum(len(t.checks) for t in one.tests)
    assert {f.node for f in figures} == {view.EVERY_NODE}
    assert len(view.tests(merged, ("skipped",))) == sum(t.outcome == "skipped" for t in one.tests)


def test_nodes_that_disagree_keep_a_row_each() -> None:
    merged, _ = load(TWO_NODES)
    second = [t for t in merged.tests if (t.node or "").startswith("node1")]
    next(c for t in second for c in t.checks if c.metric == "connectivity.rendezvous_s").value = 9.5
    rows = [f for f in view.figures(merged) if f.metric == "connectivity.rendezvous_s"]
    assert sorted((f.node, f.value) for f in rows) == [("node0-vm", 0.956), ("node1-vm", 9.5)]


def test_merged_series_are_one_line_sorted_by_size() -> None:
    merged, _ = load(TWO_NODES)
    (run,) = view.series(merged, "collectives")  # both nodes hold rank 0's gathered result: one series
    assert run.label == view.EVERY_NODE
    rows = [cast(CollectiveRow, r) for r in view.objects(run.result["rows"])]
    points = [(run.label, measured.point(r, (f"collectives.{r['op']}.busbw_gbps@{r['size']}",))) for r in rows]
    for panel in measured.panels(view.Reported(merged), points):
        (line,) = panel.lines
        assert list(line.x) == sorted(line.x) and len(set(line.x)) == len(line.x)  # no zigzag, no repeat


def test_series_of_nodes_that_measured_differently_stay_apart() -> None:
    merged, _ = load(TWO_NODES)
    probe = next(p for p in merged.probes if p.name == "collectives" and (p.node or "").startswith("node1"))
    probe.result = copy.deepcopy(probe.result)
    assert probe.result is not None
    cast(list[dict[str, Any]], probe.result["rows"])[0]["busbw_gbps"] = 1.0
    assert [s.label for s in view.series(merged, "collectives")] == ["node0-vm", "node1-vm"]


@pytest.mark.parametrize(
    "shape",
    [
        {"pairs": [{"a": "n0", "b": "n1", "busbw_gbps": 10.0}, {"a": "n1", "b": "n0", "busbw_gbps": 4.0}]},
        {
            "round1": {
                "pairs": [
                    {"node_a": "n0", "node_b": "n1", "score": 10.0, "round": 1},
                    {"node_a": "n1", "node_b": "n0", "score": 4.0, "round": 1},
                ]
            }
        },
        {"labels": ["n0", "n1"], "matrix": [[None, 10.0], [4.0, None]], "unit": "busbw_gbps"},
        [{"src": "n0", "dst": "n1", "gbps": 10.0, "bytes": 8}, {"src": "n1", "dst": "n0", "gbps": 4.0, "bytes": 8}],
    ],
)
def test_pair_matrices_of_any_shape(shape: Any) -> None:
    (found,) = pairs.matrices(doc(tests=[{"nodeid": "t::test_pairs", "measurements": {"isolation": shape}}]))
    assert found.labels == ["n0", "n1"] and found.cells == [[None, 10.0], [4.0, None]]


@pytest.mark.parametrize(
    "junk", [{"pairs": [1, 2]}, {"pairs": [{"a": "x"}]}, {"labels": ["a"], "matrix": [[1, 2]]}, [{"gpu": 0}], "text"]
)
def test_other_measurements_are_no_matrix(junk: Any) -> None:
    assert pairs.matrices(doc(tests=[{"nodeid": "t::x", "measurements": {"m": junk}}])) == []


def test_point_to_point_links_are_a_matrix() -> None:
    (p2p,) = pairs.matrices(evidence(H200))
    assert p2p.labels == ["vm:0", "vm:1"] and p2p.what == "GB/s"
    assert p2p.cells[0][1] == pytest.approx(308.466, abs=1e-3) and p2p.cells[0][0] is None


def test_table_renders_for_each_target() -> None:
    rows = [["a|b", 1234.5, None, Raw("<b>x</b>")], ["<c>", 0.5, 3, "y"]]
    text = render(["name", "value", "n", "raw"], rows)
    assert text.splitlines()[2].startswith("a|b") and "1,234" in text and text.splitlines()[2].endswith("<b>x</b>")
    assert re.search(r"\|\s+1,234 \|\s+- \|", render(["name", "value", "n", "raw"], rows, style="markdown"))
    assert "a\\|b" in render(["name", "value", "n", "raw"], rows, style="markdown")
    page = render(["name", "value", "n", "raw"], rows, style="html")
    assert "&lt;c&gt;" in page and "<td><b>x</b></td>" in page
    assert re.search(r'<td style="text-align: right;">\s*1,234</td>', page)


def test_html_is_self_contained_and_checks_itself(h200_blocks: list[Block]) -> None:
    page = html.document(h200_blocks, "t")
    assert "http://" not in page and "https://" not in page  # works offline
    assert "@media print" in page and 'document.title = problems.length ? "report-error: "' in page
    assert page.count("<img ") == (page.count('src="data:image/png;base64,') if plots.available() else 0)


def test_h200_report_names_gpus_inventory_sources_and_training(h200_blocks: list[Block]) -> None:
    text = "\n".join(repr(b) for b in h200_blocks)
    # the slowest GPU by host and full UUID, the inventory, the bound's source, every strategy
    assert "matmul: slowest vm GPU 0 (GPU-a686010c-c983-cf32-64df-1f72bc1b5409) at 647.8 TFLOP/s" in text
    assert "96.00.A5.00.1A" in text and "1653724055514" in text and "Gen5 x16 (max Gen5 x16)" in text
    assert "90% of measured 210.8 GB/s (nccl-tests 214.2)" in text
    assert [label for label, _, _ in training.runs(view.Reported(evidence(H200)))] == [
        "ddp", "fsdp", "zero1", "zero2", "zero3", "zero3_tuned", "ddp (scaling baseline)"
    ]  # fmt: skip


def test_gated_figures_come_before_information(h200_blocks: list[Block]) -> None:
    headings = [b.text for b in h200_blocks if isinstance(b, Heading)]
    assert headings.index("Gated figures (112 pass)") < headings.index("Collectives")
    assert headings.index("Training") < headings.index("Information figures (recorded, not gated)")


def test_tokens_per_dollar_where_the_profile_names_a_price() -> None:
    data = evidence(H200)
    assert "tokens/$" not in "\n".join(summary.lines(data))
    data.profile.resolved["cost"] = {"usd_per_gpu_hour": 2.5, "source": "list price"}
    head, rows = training.table(training.runs(view.Reported(data)), view.usd_per_gpu_hour(data))
    column = head.index("tokens/$")
    assert head[column - 2] == "tokens/s/GPU"
    ddp = rows[0]
    assert ddp[column] == pytest.approx(66689.07060974544 * 3600 / 2.5)
    assert re.search(r"^ddp .* 96,032,262 ", "\n".join(summary.lines(data)), re.M)


def test_terminal_summary_lists_every_figure() -> None:
    lines = summary.lines(read_evidence(ROOT / "tests" / "data" / "evidence-fail.json"))
    assert lines[0].split() == ["metric", "value", "unit", "bound", "verdict"]
    assert lines[2].split() == ["collectives.all_reduce.busbw_gbps@1G", "312.4", "GB/s", ">=", "350", "FAIL"]


def test_busbw_plot_is_a_png() -> None:
    pytest.importorskip("matplotlib")
    line = plots.Line("", [2.0**k for k in (20, 21, 22)], [1.0, 2.0, 3.0])
    png = plots.busbw([plots.Panel("all_reduce", [line], {2.0**22: 2.5}, [(2.0**21, 2.0)])], "GB/s")
    assert png is not None and png[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_family_s_section_export_rows_and_terminal_table_come_from_its_descriptor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The report names no family: each family's section, its per-unit export rows and its terminal table
    come from its descriptor (``Behaviour.report``), in the section's place. A family of the test's own, placed
    between the GPUs' inventory and training, shows up where it says, reading the run it is handed."""
    from acceptance.profile.registry import FAMILIES
    from acceptance.reports import export, sections
    from acceptance.schema.family import Behaviour, Family
    from acceptance.schema.fields import Strict
    from acceptance.schema.report import ReportedRun, ReportSection, SectionBlock, Table, UnitFigure

    def blocks(run: ReportedRun) -> list[SectionBlock]:
        return [Heading("Probe X"), Table(["health runs"], [[len(run.series("health"))]])]

    def units(run: ReportedRun) -> list[UnitFigure]:
        return [UnitFigure("probe_x.speed", 1.5, "GB/s", "vm", "GPU 7")]

    def terminal(run: ReportedRun) -> list[tuple[list[str], list[list[object]]]]:
        return [(["probe x"], [["its own line"]])]

    report = ReportSection(45, blocks, units=units, terminal=terminal)
    probe = Family("probe_x", "a family of the test's own", Strict, (), behaviour=Behaviour(report=report))
    monkeypatch.setattr(sections, "FAMILIES", (*FAMILIES, probe))
    data = evidence(H200)
    found = [b for f, _ in sections.reporting() if f.name in ("health", "probe_x") for b in sections.section(f, data)]
    headings = [b.text for b in found if isinstance(b, Heading)]
    assert headings == ["Health inventory", "Probe X"]
    assert Table(["health runs"], [[1]]) in found
    assert [f.name for f, _ in sections.reporting()][-3:] == ["probe_x", "training", "soak"]
    assert "probe_x.speed,1.5,GB/s,,info,vm,GPU 7,,per-GPU measurement" in export.csv_text(data).splitlines()
    assert "its own line" in "\n".join(summary.lines(data))
