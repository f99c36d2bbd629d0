"""The fabric family on recorded sysfs trees (tests/data/fabric/: two InfiniBand HCAs as the kernel lists
them under /sys/class/infiniband, before and after a run whose mlx5_0 port 1 counted symbol errors and a
link down): the reader, the rules that name node, HCA and port, and the suite's module end to end."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from acceptance.families import fabric as rules
from acceptance.probes import fabric as probe
from acceptance.profile.sections import FABRIC_ERROR_COUNTERS
from tests.harness import PLUGIN_ARGS, ROOT, evidence

TREES = ROOT / "tests" / "data" / "fabric"


def read(tree: str) -> rules.FabricReading:
    return probe.read(TREES / tree, pci=TREES / "no-pci")


def test_the_reader_takes_state_rate_width_counters_and_numa() -> None:
    found = read("before")
    assert found["error"] is None and found["gpus"] == []
    first, second = found["ports"]
    assert (first["hca"], first["port"], first["state"], first["phys_state"]) == ("mlx5_0", "1", "ACTIVE", "LinkUp")
    assert (first["rate"], first["width"], first["link_layer"], first["numa_node"]) == (
        "400 Gb/sec (4X NDR)", "4X", "InfiniBand", 0,
    )  # fmt: skip
    assert first["counters"]["symbol_error"] == 0 and first["counters"]["port_xmit_data"] == 123456789
    assert (second["state"], second["link_layer"], second["numa_node"]) == ("DOWN", "Ethernet", 1)


def test_a_rise_of_an_error_counter_names_node_hca_port_and_counter() -> None:
    before, after = read("before"), read("after")
    host = after["host"]
    figures = rules.evaluate(before, after, FABRIC_ERROR_COUNTERS)
    rose = figures["fabric.counter_increases"]
    assert rose.value == 2  # symbol_error and link_downed; the data counters are not errors
    assert rose.detail == f"{host} mlx5_0 port 1: symbol_error 0 -> 12; {host} mlx5_0 port 1: link_downed 1 -> 2"
    assert figures["fabric.ports"].value == 2
    assert figures["fabric.ports_down"].value == 1
    assert "mlx5_1 port 1: DOWN 10 Gb/sec (1X QDR) (Ethernet)" in figures["fabric.ports_down"].detail
    same = rules.evaluate(before, before, FABRIC_ERROR_COUNTERS)["fabric.counter_increases"]
    assert same.value == 0 and same.skip is None
    assert rules.affinity(after) == ["mlx5_0: NUMA 0", "mlx5_1: NUMA 1"]


def test_a_node_without_ports_records_it_and_fails_nothing(tmp_path: Path) -> None:
    none = probe.read(tmp_path / "absent", pci=tmp_path)
    assert none["ports"] == [] and "absent" in str(none["error"])
    figures = rules.evaluate(none, none, FABRIC_ERROR_COUNTERS)
    assert figures["fabric.counter_increases"].skip == (f"{none['host']} has no InfiniBand/RoCE port: {none['error']}")
    assert figures["fabric.ports"].value == 0 and figures["fabric.ports"].skip is None


SWAP = """
import shutil
from pathlib import Path

def pytest_collection_finish(session):
    # after the plugin's first reading (taken beside the preflight): the counters rise during the run
    shutil.rmtree("sysfs")
    shutil.copytree("{after}", "sysfs")
"""


@pytest.mark.e2e
def test_the_suite_fails_a_port_whose_counters_rose(suite: pytest.Pytester) -> None:
    shutil.copytree(TREES / "before", suite.path / "sysfs")
    suite.makeconftest(SWAP.format(after=TREES / "after"))
    folder = suite.path / "ev"
    result = suite.runpytest(
        *PLUGIN_ARGS, "-p", "no:cacheprovider", "--cluster-profile", "local-cpu", "--cluster-evidence", str(folder),
        "--cluster-set", f"fabric.sysfs_root={suite.path / 'sysfs'}", "-m", "fabric", "tests_cluster/",
    )  # fmt: skip
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "fabric.counter_increases = 2 counters, expected == 0*",
            "*mlx5_0 port 1: symbol_error 0 -> 12;*mlx5_0 port 1: link_downed 1 -> 2",
            "verdict: FAIL*",
        ]
    )
    data = evidence(folder)
    assert data["cluster"]["fabric_before"]["ports"][0]["counters"]["symbol_error"] == 0
    drain = (folder / "drain.json").read_text()
    assert "fabric.counter_increases = 2" in drain and "mlx5_0 port 1" in drain
