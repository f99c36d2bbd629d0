"""The fabric family on recorded sysfs trees (tests/data/fabric/: two InfiniBand HCAs as the kernel lists
them under /sys/class/infiniband, before and after a run whose mlx5_0 port 1 counted symbol errors and a
link down): the reader, the rules that name node, HCA and port, and the suite's module end to end."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from acceptance.families import fabric as rules
from acceptance.families.fabric import FABRIC_ERROR_COUNTERS
from acceptance.probes import fabric as probe
from acceptance.run import fabric_readings
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
    assert none["ports"] == [] and none["error"] is None  # no InfiniBand stack: nothing failed
    figures = rules.evaluate(none, none, FABRIC_ERROR_COUNTERS)
    assert figures["fabric.counter_increases"].skip == (
        f"{none['host']} has no InfiniBand/RoCE port: no port under {tmp_path / 'absent'}"
    )
    assert figures["fabric.ports"].value == 0 and figures["fabric.ports"].skip is None
    assert all(f.unmeasured == [] for f in figures.values())


def failed(reading: rules.FabricReading, why: str = "timed out") -> rules.FabricReading:
    return {**reading, "ports": [], "error": f"acceptance.probes.fabric gave no answer: {why}"}


def test_a_failed_or_missing_reading_fails_the_counters_never_a_pass_or_a_skip() -> None:
    before, after = read("before"), read("after")
    host = after["host"]
    first = rules.evaluate(failed(before), after, FABRIC_ERROR_COUNTERS)["fabric.counter_increases"]
    assert first.skip is None and first.value == 0
    assert first.unmeasured == [f"{host}: the first reading failed: acceptance.probes.fabric gave no answer: timed out"]
    second = rules.evaluate(before, failed(after, "crashed"), FABRIC_ERROR_COUNTERS)
    rose = second["fabric.counter_increases"]
    assert rose.skip is None and "second reading failed" in str(rose.unmeasured_text)
    why = f"{host}: the second reading failed: acceptance.probes.fabric gave no answer: crashed"
    assert second["fabric.ports"].unmeasured == second["fabric.ports_down"].unmeasured == [why]
    assert second["fabric.ports_down"].skip is None
    alone = rules.evaluate(None, before, FABRIC_ERROR_COUNTERS)["fabric.counter_increases"]
    assert alone.skip is None and alone.value == 0
    assert alone.unmeasured == [f"{host}: no first reading of the ports was stored (it is taken beside the preflight)"]


def test_a_port_gone_by_the_second_reading_is_named_and_fails() -> None:
    before, after = read("before"), read("after")
    host = after["host"]
    gone: rules.FabricReading = {**after, "ports": after["ports"][1:]}  # mlx5_0 port 1 went away
    fig = rules.evaluate(before, gone, FABRIC_ERROR_COUNTERS)["fabric.counter_increases"]
    assert fig.unmeasured == [f"{host} mlx5_0 port 1: present before the probes, missing after"]
    empty: rules.FabricReading = {**after, "ports": []}  # every port gone, the reading itself whole
    fig = rules.evaluate(before, empty, FABRIC_ERROR_COUNTERS)["fabric.counter_increases"]
    assert fig.skip is None and "mlx5_1 port 1: present before" in str(fig.unmeasured_text)


def test_a_reader_that_gives_no_reading_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    answers: list[subprocess.CompletedProcess[str] | Exception] = [
        subprocess.CompletedProcess([], 1, "", "Traceback ...\nKeyError: 'ports'\n"),  # a crash
        subprocess.CompletedProcess([], 0, "[]", ""),  # JSON, not a reading
        subprocess.TimeoutExpired("fabric", 30.0),  # a hung driver
    ]

    def run(*args: object, **kwargs: object) -> subprocess.CompletedProcess[str]:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(subprocess, "run", run)  # the reader's own subprocess.run
    crash, garbage, hung = (fabric_readings.read("/sys/class/infiniband") for _ in range(3))
    assert crash["ports"] == [] and "gave no answer" in str(crash["error"])
    assert "exit 1, not a reading of the ports: KeyError: 'ports'" in str(crash["error"])
    assert garbage["ports"] == [] and "not a reading of the ports" in str(garbage["error"])
    assert hung["ports"] == [] and "TimeoutExpired" in str(hung["error"])


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


BREAK = """
import shutil
from pathlib import Path

def pytest_collection_finish(session):
    # after the plugin's first reading, before the family's second
    {action}
"""
FIRST_FAILS = f'Path("sysfs").unlink(); shutil.copytree("{TREES / "before"}", "sysfs")'  # a file was read
SECOND_FAILS = 'shutil.rmtree("sysfs"); Path("sysfs").write_text("not a folder")'


@pytest.mark.e2e
@pytest.mark.parametrize(("action", "line"), [(FIRST_FAILS, "*the first reading failed*"),
                                              (SECOND_FAILS, "*the second reading failed*")],
                         ids=["first", "second"])  # fmt: skip
def test_the_suite_fails_a_reading_that_failed(suite: pytest.Pytester, action: str, line: str) -> None:
    """A root that is there and cannot be listed (a file) fails its reading: the counters' test fails with it,
    never a pass (a failed first reading) nor a skip as a node without ports (a failed second one)."""
    if action == FIRST_FAILS:
        (suite.path / "sysfs").write_text("not a folder")
    else:
        shutil.copytree(TREES / "before", suite.path / "sysfs")
    suite.makeconftest(BREAK.format(action=action))
    folder = suite.path / "ev"
    result = suite.runpytest(
        *PLUGIN_ARGS, "-p", "no:cacheprovider", "--cluster-profile", "local-cpu", "--cluster-evidence", str(folder),
        "--cluster-set", f"fabric.sysfs_root={suite.path / 'sysfs'}", "-m", "fabric", "tests_cluster/",
    )  # fmt: skip
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([line, "verdict: FAIL*"])
    assert "has no InfiniBand/RoCE port" not in result.stdout.str()
