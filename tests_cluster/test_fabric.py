"""Did any InfiniBand/RoCE port of this node count errors while the suite moved data over it?"""

from __future__ import annotations

import pytest

from acceptance.families import fabric as fabric_rules
from acceptance.plugin.api import Checker, ClusterRun, fabric_figures


@pytest.fixture(scope="module")
def fabric(cluster: ClusterRun) -> fabric_rules.FabricResult:
    return fabric_figures(cluster)


def test_ports(fabric: fabric_rules.FabricResult, check: Checker) -> None:
    """Every port's state, rate and width, and the HCAs' and GPUs' NUMA nodes, on record; a node without an
    InfiniBand/RoCE port records that it has none."""
    check.measurements("before", fabric.before)
    check.measurements("after", fabric.after)
    check.measurements("numa", fabric_rules.affinity(fabric.after))
    figures = [fabric.figures[m] for m in ("fabric.ports", "fabric.ports_down")]
    unmeasured = next((f.unmeasured_text for f in figures if f.unmeasured), None)  # the second reading failed
    check.all(figures, unmeasured=unmeasured)


def test_error_counters_did_not_rise(fabric: fabric_rules.FabricResult, check: Checker) -> None:
    """symbol_error, link_downed, port_rcv_errors, ...: none may rise during the run (node, HCA, port named).
    A reading that failed, no first reading, or a port gone by the second fails it: never a pass unmeasured."""
    check(fabric.figures["fabric.counter_increases"])
