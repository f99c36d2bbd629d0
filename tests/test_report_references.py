"""The report's reference column: each figure beside what a healthy machine of the run's kind measures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from acceptance.evidence.model import EvidenceDoc
from acceptance.evidence.store import read_evidence
from acceptance.reports import overview
from acceptance.reports.blocks import Table
from acceptance.reports.references import column
from tests.harness import doc

ROOT = Path(__file__).resolve().parent.parent


def first_table(blocks: list[Any]) -> Table:
    found = [b for b in blocks if isinstance(b, Table)]
    assert found, blocks
    return found[0]


def cell(table: Table, metric: str, name: str) -> object:
    row = next(r for r in table.rows if metric in r)
    return row[list(table.head).index(name)]


def evidence(device: str, gpu_model: str | None, gpus: int, env: dict[str, str], checks: list[str],
             probes: list[dict[str, Any]] | None = None, nodes: int = 1) -> EvidenceDoc:  # fmt: skip
    topo = {"nodes": nodes, "gpus_per_node": gpus, "gpu_model": gpu_model, "device": device}
    return doc(
        profile={"name": "p", "resolved": {"topology": topo, "env": env}},
        topology={"nodes": nodes, "ranks_per_node": max(gpus, 1), "world_size": max(nodes * gpus, 1)},
        probes=probes or [],
        tests=[
            {"nodeid": "t", "outcome": "passed", "checks": [
                {"metric": m, "value": 1.0, "unit": "GB/s", "verdict": "pass", "bound": ">= 0.5"} for m in checks
            ]},
        ],
    )  # fmt: skip


def test_a_gpu_run_shows_each_figure_beside_its_reference_and_source() -> None:
    data = read_evidence(ROOT / "tests/data/evidence/h200-x2/evidence.json")
    table = first_table(overview.gated(data))
    assert "reference" in table.head and "source" in table.head
    shown = str(cell(table, "collectives.all_reduce.busbw_gbps@4G", "reference"))
    assert shown.startswith("normal for 2x H200 on NVLink (NV18), no NVLS: ~347 GB/s (nccl-tests 2.19.6")
    assert "docs/measurements.md" in shown
    assert str(cell(table, "compute.matmul_tflops_min", "reference")).startswith("peak of H200 SXM dense bf16: 989.4")
    # the profile's own source stays beside it
    assert "measured" in str(cell(table, "collectives.all_reduce.busbw_gbps@4G", "source"))
    assert cell(table, "collectives.all_reduce.busbw_gbps@1G", "reference") == ""  # no public figure at 1G


def test_a_cpu_run_has_no_reference_column() -> None:
    data = evidence("cpu", None, 0, {}, ["compute.matmul_tflops_min", "collectives.all_reduce.busbw_gbps@8M"])
    assert "reference" not in first_table(overview.gated(data)).head


def test_nvls_not_pinned_shows_only_the_rows_that_do_not_depend_on_it() -> None:
    checks = ["collectives.all_reduce.busbw_gbps@4G", "collectives.all_gather.busbw_gbps@4G"]
    words = column(evidence("cuda", "NVIDIA H100 80GB HBM3", 8, {}, checks))
    assert words(checks[0]) == ""
    assert words(checks[1]).startswith("normal for 8x H100 SXM: ~370 GB/s")
    pinned = column(evidence("cuda", "NVIDIA H100 80GB HBM3", 8, {"NCCL_NVLS_ENABLE": "1"}, checks))
    assert pinned(checks[0]).startswith("normal for 8x H100 SXM with NVLS: ~480 GB/s")


def test_the_rail_reference_comes_from_the_ports_the_drift_probe_recorded() -> None:
    hcas = [{"hca": f"mlx5_{i}", "fw_ver": "28.39", "rates": {"1": "400 Gb/sec (4X NDR)"}} for i in range(2)]
    drift = {"name": "drift", "status": "ok", "result": {"nodes": [{"node": {"hcas": hcas}}]}}
    data = evidence("cuda", "NVIDIA H100 80GB HBM3", 8, {}, ["internode.rail_min_gbps"], [drift], nodes=2)
    assert column(data)("internode.rail_min_gbps").startswith("normal for one NDR InfiniBand port")
    assert column(evidence("cuda", "NVIDIA H100 80GB HBM3", 8, {}, [], nodes=2))("internode.rail_min_gbps") == ""
