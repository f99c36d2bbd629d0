"""The session's gates as a CI system sees them: JUnit carries every non-PASS verdict as a failure or an
error, a rerun of part of a family is PARTIAL (never FAIL for thresholds whose tests were not selected), a
threshold the profile's device can never measure is refused before anything runs, and a full evidence disk
ends in one line."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from acceptance.evidence import junit
from acceptance.plugin.summary import summary_lines
from acceptance.profile import metrics
from tests.harness import PLUGIN_ARGS, counts, doc, evidence

PROFILE = """
name: synthetic
topology: {nodes: 1, ranks_per_node: 2, device: cpu, backend: gloo}
thresholds:
  connectivity.rendezvous_s: {max: 1}
  connectivity.barrier_latency_us: {max: 100}
"""
ONE = "def test_one(check):\n    check('connectivity.rendezvous_s', 0.5, 's')\n"
# test_two misses its bound while the file ``flaky`` exists: a failure that a rerun no longer shows
TWO = ONE + (
    "def test_two(check):\n"
    "    import pathlib\n"
    "    check('connectivity.barrier_latency_us', 500.0 if pathlib.Path('flaky').exists() else 5.0, 'us')\n"
)


def _suite(pytester: pytest.Pytester, module: str = ONE, profile: str = PROFILE) -> None:
    pytester.makepyfile(test_connectivity=module)
    pytester.makefile(".yaml", synthetic=profile)


def _suite_element(path: Path) -> ET.Element:
    suite = ET.parse(path).getroot().find("testsuite")
    assert suite is not None
    return suite


def _cases(path: Path) -> dict[str, ET.Element]:
    return {str(c.get("name")): c for c in ET.parse(path).getroot().iter("testcase")}


def _properties(element: ET.Element) -> dict[str, str]:
    found = element.find("properties")
    return {} if found is None else {str(p.get("name")): str(p.get("value")) for p in found.iter("property")}


def _own_junit(folder: Path) -> Path:
    return folder / f"junit-{socket.gethostname()}.xml"


# --- hole 3: JUnit green on a FAIL ------------------------------------------------------------------------


def test_a_session_failure_is_a_failed_case_in_both_junit_files(pytester: pytest.Pytester) -> None:
    """Thresholds no test checked: every test passed, the verdict is FAIL, and both JUnit files say so with
    a failed ``verdict`` case carrying the session's errors, and the verdict as a suite property."""
    _suite(pytester)
    junit = pytester.path / "out.xml"
    result = pytester.runpytest(*PLUGIN_ARGS, "--cluster-profile", "synthetic.yaml", "--cluster-evidence", "ev",
                                f"--junitxml={junit}")  # fmt: skip
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert counts(result) == {"passed": 1, "failed": 1}
    result.stdout.fnmatch_lines(["FAILED cluster-acceptance::verdict - verdict FAIL: thresholds that no test *"])
    for path in (junit, _own_junit(pytester.path / "ev")):
        suite = _suite_element(path)
        assert (suite.get("failures"), suite.get("errors")) == ("1", "0"), path
        failure = _cases(path)["verdict"].find("failure")
        assert failure is not None, path
        assert "thresholds that no test checked: connectivity.barrier_latency_us" in str(failure.get("message"))
        assert _properties(suite)["verdict"] == "FAIL", path
    assert evidence(pytester.path / "ev")["verdict"] == "FAIL"


def test_a_pass_adds_no_case_and_names_its_verdict(pytester: pytest.Pytester) -> None:
    _suite(pytester, module=TWO)
    junit = pytester.path / "out.xml"
    result = pytester.runpytest(*PLUGIN_ARGS, "--cluster-profile", "synthetic.yaml", "--cluster-evidence", "ev",
                                f"--junitxml={junit}")  # fmt: skip
    assert result.ret == pytest.ExitCode.OK
    assert counts(result) == {"passed": 2}
    for path in (junit, _own_junit(pytester.path / "ev")):
        assert "verdict" not in _cases(path), path
    # the connectivity module alone of the suite's families: PARTIAL, named, and no failure
    assert _properties(_suite_element(junit))["verdict"] == "PARTIAL"


def _killed(tmp_path: Path) -> dict[str, Any]:
    """Evidence as a SIGKILLed run leaves it: the default verdict FAIL, not complete, one test passed and
    one running; four tests were selected."""
    return {
        "verdict": "FAIL",
        "complete": False,
        "profile": {"name": "p", "sha256": "0" * 64},
        "topology": {"host": "h"},
        "selected": ["t.py::a", "t.py::b", "t.py::c", "t.py::d"],
        "tests": [
            {"nodeid": "t.py::a", "outcome": "passed", "checks": []},
            {"nodeid": "t.py::b", "outcome": "passed", "checks": []},
        ],
        "errors": [],
    }


def test_junit_of_a_killed_run_reads_incomplete_and_counts_every_selected_test(tmp_path: Path) -> None:
    suite = ET.fromstring(junit.junit_xml(doc(**_killed(tmp_path)))).find("testsuite")
    assert suite is not None
    assert _properties(suite)["verdict"] == "INCOMPLETE"
    names = [c.get("name") for c in suite.iter("testcase")]
    assert names == ["a", "b", "c", "d", "verdict"]
    assert (suite.get("tests"), suite.get("errors"), suite.get("skipped")) == ("5", "1", "2")


def test_junit_of_a_partial_run_has_no_failure() -> None:
    data = {**_killed(Path()), "verdict": "PARTIAL", "complete": True, "partial": True, "selected": []}
    data["tests"] = [{"nodeid": "t.py::a", "outcome": "passed", "checks": [{"metric": "m", "verdict": "pass"}]}]
    suite = ET.fromstring(junit.junit_xml(doc(**data))).find("testsuite")
    assert suite is not None
    assert (suite.get("failures"), suite.get("errors")) == ("0", "0")
    assert _properties(suite)["verdict"] == "PARTIAL"
    assert junit.VERDICT_CASE.rpartition("::")[2] not in [c.get("name") for c in suite.iter("testcase")]


# --- hole 5: reruns read as failures ----------------------------------------------------------------------


def test_last_failed_rerun_is_partial_not_fail(pytester: pytest.Pytester) -> None:
    _suite(pytester, module=TWO)
    (pytester.path / "flaky").write_text("")
    first = pytester.runpytest(*PLUGIN_ARGS, "--cluster-profile", "synthetic.yaml", "--cluster-evidence", "ev1")
    assert first.ret == pytest.ExitCode.TESTS_FAILED
    (pytester.path / "flaky").unlink()
    rerun = pytester.runpytest(*PLUGIN_ARGS, "--cluster-profile", "synthetic.yaml", "--cluster-evidence", "ev2",
                               "--lf")  # fmt: skip
    assert counts(rerun) == {"passed": 1, "deselected": 1} or counts(rerun) == {"passed": 1}
    data = evidence(pytester.path / "ev2")
    assert data["errors"] == [] and data["verdict"] == "PARTIAL", data["errors"]
    assert rerun.ret == pytest.ExitCode.OK
    rerun.stdout.fnmatch_lines(["thresholds no test checked [[]not enforced*[]]: connectivity.rendezvous_s"])


def test_one_test_by_node_id_is_partial_not_fail(pytester: pytest.Pytester) -> None:
    _suite(pytester, module=TWO)
    result = pytester.runpytest(*PLUGIN_ARGS, "--cluster-profile", "synthetic.yaml", "--cluster-evidence", "ev",
                                "test_connectivity.py::test_one")  # fmt: skip
    data = evidence(pytester.path / "ev")
    assert data["errors"] == [] and data["verdict"] == "PARTIAL", data["errors"]
    assert result.ret == pytest.ExitCode.OK
    assert data["unchecked_thresholds"] == ["connectivity.barrier_latency_us"]


def test_a_whole_module_still_enforces_its_thresholds() -> None:
    """The summary marks only the enforced thresholds [ERROR]; the others are named as not enforced."""
    data = {
        "tests": [],
        "unchecked_thresholds": ["connectivity.rendezvous_s", "health.gpu_count"],
        "errors": ["thresholds that no test checked: connectivity.rendezvous_s"],
        "verdict": "FAIL",
    }
    lines = [line for line, _ in summary_lines(doc(**data), "ev")]
    assert "thresholds no test checked [ERROR]: connectivity.rendezvous_s" in lines
    assert any(line.startswith("thresholds no test checked [not enforced") and "health.gpu_count" in line
               for line in lines), lines  # fmt: skip


# --- hole 7: unmeasurable thresholds accepted --------------------------------------------------------------


@pytest.mark.parametrize(
    "metric",
    [
        "health.gpu_count",
        "health.wall_s",
        "compute.h2d_gbps_min",
        "compute.d2h_gbps_below_median",
        "compute.matmul_fp8_tflops_median",
        "training.ddp.mfu",
        "training.ddp.gpu_util_pct",
        "drift.gpus_differing",
    ],
)
def test_a_gpu_only_figure_cannot_be_bounded_on_the_cpu(metric: str) -> None:
    problem = metrics.device_problem(metric, "cpu")
    assert problem is not None and "cpu" in problem, problem
    assert metrics.device_problem(metric, "cuda") is None


@pytest.mark.parametrize(
    "metric",
    ["compute.matmul_tflops_min", "compute.copy_gbps_min", "training.ddp.tokens_per_s_per_gpu",
     "connectivity.p2p_min_gbps", "drift.nodes_differing", "storage.tmp.write_gbps"],
)  # fmt: skip
def test_figures_the_cpu_path_measures_are_accepted(metric: str) -> None:
    assert metrics.device_problem(metric, "cpu") is None


def test_a_cpu_profile_bounding_a_gpu_figure_is_refused_before_anything_runs(pytester: pytest.Pytester) -> None:
    _suite(pytester, profile=PROFILE + "  health.gpu_count: {eq: 8}\n")
    result = pytester.runpytest(*PLUGIN_ARGS, "--cluster-profile", "synthetic.yaml", "--cluster-evidence", "ev")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*threshold health.gpu_count: topology.device cpu never measures it*"])
    assert "Traceback" not in result.stderr.str() + result.stdout.str()
    assert not (pytester.path / "ev" / "evidence.json").exists()


# --- hole 4: a full evidence disk ---------------------------------------------------------------------------


def _mounted_tmpfs(folder: Path, size: str) -> None:
    folder.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], check=True)


@pytest.mark.e2e
@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs needs root")
def test_a_full_evidence_disk_ends_in_one_line_and_keeps_the_last_good_evidence(pytester: pytest.Pytester) -> None:
    # a figure's measurements grow the document past the disk's size in the second test
    big = (
        "def test_big(check):\n"
        "    check.measurements('blob', 'x' * 400_000)\n"
        "    check('connectivity.rendezvous_s', 0.5, 's')\n"
    )
    _suite(pytester, module=ONE + big, profile=PROFILE.replace("  connectivity.barrier_latency_us: {max: 100}\n", ""))
    disk = pytester.path / "disk"
    _mounted_tmpfs(disk, "200k")
    try:
        result = pytester.runpytest_subprocess(*PLUGIN_ARGS, "-p", "no:cacheprovider", "--cluster-profile",
                                               "synthetic.yaml", "--cluster-evidence", str(disk / "ev"))  # fmt: skip
        output = result.stdout.str() + result.stderr.str()
        assert result.ret in (3, 4), output
        assert "INTERNALERROR" not in output and "Traceback" not in output, output
        assert "No space left on device" in output, output
        leftover = [p.name for p in (disk / "ev").iterdir() if p.name.endswith(".tmp")]
        assert leftover == [], leftover
        data = json.loads((disk / "ev" / "evidence.json").read_text())  # still a whole document
        assert data["complete"] is False and data["verdict"] != "PASS"
    finally:
        subprocess.run(["umount", str(disk)], check=False)


@pytest.mark.e2e
@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs needs root")
def test_a_disk_full_at_the_start_is_a_usage_error(pytester: pytest.Pytester) -> None:
    _suite(pytester)
    disk = pytester.path / "disk"
    _mounted_tmpfs(disk, "8k")
    with contextlib.suppress(OSError):  # the disk ends full, as meant
        (disk / "filler").write_bytes(b"x" * 8192)
    try:
        result = pytester.runpytest_subprocess(*PLUGIN_ARGS, "-p", "no:cacheprovider", "--cluster-profile",
                                               "synthetic.yaml", "--cluster-evidence", str(disk / "ev"))  # fmt: skip
        output = result.stdout.str() + result.stderr.str()
        assert result.ret == pytest.ExitCode.USAGE_ERROR, output
        assert "INTERNALERROR" not in output and "Traceback" not in output, output
        assert "No space left on device" in output, output
        assert not [p for p in disk.rglob("*.tmp")]
    finally:
        subprocess.run(["umount", str(disk)], check=False)


# --- hole 9: one probe failure, one full report ---------------------------------------------------------------

FAILED_PROBE = """
import pytest
from acceptance.plugin.api import ProbeError, probe_result

@pytest.fixture(scope="module")
def result(cluster):
    # the probe failed once; every test that needs it asks again and gets the same failure
    cluster._probes["connectivity"] = ProbeError("probe connectivity failed: rank 1 raised RuntimeError: boom\\nTAIL")
    return probe_result(cluster, "connectivity", dict)

def test_first(result):
    pass

def test_second(result):
    pass

def test_third(cluster):
    probe_result(cluster, "connectivity", dict)
"""


def test_a_probe_failure_is_shown_once_and_pointed_at_after(pytester: pytest.Pytester) -> None:
    """Setup errors of a module's fixture and failures in a test body alike: the first report holds the
    probe's log tail, every later one a single line that points at it."""
    _suite(pytester, module=FAILED_PROBE)
    result = pytester.runpytest(*PLUGIN_ARGS, "--cluster-profile", "synthetic.yaml", "--cluster-evidence", "ev")
    assert counts(result) == {"errors": 2, "failed": 1}
    sections = result.stdout.str().split("short test summary info")[0]
    assert sections.count("TAIL") == 1, sections
    pointer = "probe connectivity failed: see test_connectivity.py::test_first above"
    assert sections.count(pointer) == 2, sections


def test_a_write_that_fails_keeps_the_old_file_and_leaves_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from acceptance.atomic_file import write_atomic

    target = tmp_path / "evidence.json"
    write_atomic(target, "old")

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError, match="No space left"):
        write_atomic(target, "new")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["evidence.json"]
