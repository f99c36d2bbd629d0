"""The plugin end to end: pytest runs of the shipped suite on local-cpu with real torchrun jobs, and of
small synthetic test files that exercise checking, the verdict table and the session's gates."""

from __future__ import annotations

import re
import signal
import socket
import statistics
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tests.harness import PLUGIN_ARGS, counts, evidence, schema

# a small sweep keeps each torchrun job to a few seconds on two cores
SMALL = (
    "--cluster-set", "collectives.ops=[all_reduce, all_gather]", "--cluster-set", "collectives.sizes=[64K, 8M]",
    "--cluster-set", "collectives.spread_sizes=[64K]",
)  # fmt: skip
# the modules whose probes these tests exercise; the suite's other modules have tests of their own
SPINE_MODULES = ("tests_cluster/test_connectivity.py", "tests_cluster/test_collectives.py")
RUN_TIMEOUT_S = 300  # only so that a broken launcher cannot hang CI; no test here measures speed


def run_suite(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, Path]:
    folder = pytester.path / "evidence"
    result = pytester.runpytest_subprocess(
        *PLUGIN_ARGS, "-p", "no:cacheprovider", "--cluster-evidence", str(folder), *args, timeout=RUN_TIMEOUT_S
    )
    return result, folder


def assert_valid(folder: Path) -> dict[str, Any]:
    data = evidence(folder)
    jsonschema.validate(data, schema())
    return data


def assert_no_rank_alive(probe_dir: Path) -> None:
    for state in probe_dir.glob("rank-*.json"):
        pid = int(re.search(r'"pid": (\d+)', state.read_text()).group(1))  # type: ignore[union-attr]
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text(), (
            f"rank process {pid} outlived its probe"
        )


@pytest.mark.e2e
def test_local_cpu_spine_passes_as_a_partial_run(suite: pytest.Pytester) -> None:
    junit = suite.path / "junit.xml"
    result, folder = run_suite(suite, "--cluster-profile", "local-cpu", *SMALL, f"--junitxml={junit}", *SPINE_MODULES)
    # skipped: the transport NCCL used, on gloo (no NCCL to ask); recorded: among them the spread pass's
    # lateness at 64K, beside the gated late_ranks, and each op's latency at 64K (below 1M)
    assert counts(result) == {"passed": 15, "recorded": 11, "skipped": 2}
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        [
            "cluster-acceptance * (*)",
            "cluster profile: local-cpu (*local-cpu.yaml) sha256 *",
            "cluster topology: 1 node(s) x 2 rank(s), cpu/gloo, node rank 0, head 127.0.0.1:29400 *",
            "*cluster acceptance: profile local-cpu*",
            "metric * value * unit * bound * verdict",
            "connectivity.world_size * 2 * ranks * == 2 * PASS",
            "collectives.all_reduce.busbw_gbps@8M * GB/s * >= 0.005 * PASS",
            "collectives.all_gather.busbw_gbps@64K * GB/s * - * INFO",
            "collectives.all_reduce.latency_us@64K * us * - * INFO",
            "collectives.all_reduce.wrong@8M * 0 * elements * == 0 * PASS",
            "collectives.all_gather.lateness_p99_us@64K * us * - * INFO",
            "collectives.late_ranks * 0 * ranks * == 0 * PASS",
            "verdict: PARTIAL: only part of the suite was selected*; evidence: *evidence.json",
        ]
    )
    data = assert_valid(folder)
    # two families of six: every gate held, and still not a verdict on the cluster
    assert data["complete"] is True and data["verdict"] == "PARTIAL" and data["errors"] == []
    # the profile's other families are not enforced when their modules were not selected; these were
    assert not [m for m in data["unchecked_thresholds"] if m.startswith(("connectivity.", "collectives."))]
    assert [p["status"] for p in data["probes"]] == ["ok", "ok"]
    assert len(data["cluster"]["nodes"]) == 1 and len(data["cluster"]["nodes"][0]["devices"]) == 2
    sweep = next(t for t in data["tests"] if t["nodeid"].endswith("test_sweep_complete"))
    assert {(r["op"], r["size"]) for r in sweep["measurements"]["sweep"]["rows"]} == {
        (op, size) for op in ("all_reduce", "all_gather") for size in ("64K", "8M")
    }
    found = sweep["measurements"]["sweep"]
    assert [(s["op"], s["size"], s["calls"], len(s["ranks"])) for s in found["spread"]] == [
        ("all_reduce", "64K", 100, 2),
        ("all_gather", "64K", 100, 2),
    ]
    assert [(p["rank"], p["gpu"]) for p in found["places"]] == [(0, None), (1, None)]
    for row in sweep["measurements"]["sweep"]["rows"]:  # each rank's time is its median timed window
        windows = row["busbw_windows_gbps"]
        assert len(windows) == 5 and min(windows) <= row["busbw_gbps"] * 1.0001
        assert row["window_spread"] == pytest.approx((max(windows) - min(windows)) / statistics.median(windows))
    for probe in data["probes"]:
        out = folder / probe["out_dir"]
        for name in ("spec.json", "result.json", "rank-0.json", "rank-1.json", "torchrun.log"):
            assert (out / name).is_file(), f"{out / name} is missing"
        assert list((out / "logs").rglob("stdout.log")), "per-rank logs are missing"
        assert_no_rank_alive(out)
    own = ET.parse(folder / f"junit-{socket.gethostname()}.xml").getroot().find("testsuite")
    assert own is not None and own.get("tests") == "28" and own.get("failures") == "0"
    # the recorded tests are passing cases marked so, in both files: only the two that did not run are skipped
    for file in (junit, folder / f"junit-{socket.gethostname()}.xml"):
        cases = list(ET.parse(file).getroot().iter("testcase"))
        assert sum(1 for c in cases if c.find("skipped") is not None) == 2, file
        marked = [c for c in cases if ("cluster_outcome", "recorded") in _properties(c)]
        assert len(marked) == 11 and all(c.find("skipped") is None for c in marked), file
    props = {p.get("name") for p in ET.parse(junit).getroot().iter("property")}
    assert {"collectives.all_reduce.busbw_gbps@8M", "connectivity.p2p_min_gbps"} <= props


@pytest.mark.e2e
def test_impossible_bound_fails_with_one_line(suite: pytest.Pytester) -> None:
    bound = "--cluster-set=thresholds.collectives.all_reduce.busbw_gbps@8M.min=1e6"
    result, folder = run_suite(
        suite, "--cluster-profile", "local-cpu", *SMALL, bound, "-k", "test_busbw and all_reduce", *SPINE_MODULES
    )
    assert counts(result) == {"failed": 1, "recorded": 1, "deselected": 26}
    line = (
        r"collectives\.all_reduce\.busbw_gbps@8M = [0-9.,e+-]+ GB/s, expected >= 1e\+06 "
        r"\(profile local-cpu, --cluster-set thresholds\.collectives\.all_reduce\.busbw_gbps@8M\.min=1e6\)"
    )
    assert re.search(line, result.stdout.str()), result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "collectives.all_reduce.busbw_gbps@8M = * GB/s, expected >= 1e+06 (profile local-cpu, --cluster-set *)",
            "all_reduce 8M: * us mean over ranks (longest * us); algbw *; 5 timed windows *-* GB/s (spread *%; "
            "a rank's time is its median window's)",
            "culprit: the connectivity family names the slowest GPU links",
            "collectives.all_reduce.busbw_gbps@8M * GB/s * >= 1e+06 * FAIL",
            "verdict: FAIL; *",
        ]
    )
    data = assert_valid(folder)
    assert data["verdict"] == "FAIL" and data["complete"] is True
    failed = [c for c in (c for t in data["tests"] for c in t["checks"]) if c["verdict"] == "fail"]
    assert [c["metric"] for c in failed] == ["collectives.all_reduce.busbw_gbps@8M"]
    assert failed[0]["threshold"]["min"] == 1e6


@pytest.mark.e2e
def test_a_rank_past_the_spread_bound_is_named_with_its_node_and_host(suite: pytest.Pytester) -> None:
    """The spread rule at ratio 1 and no floor, at one op and size: of two ranks whose lateness p99s differ, the
    later one stands out; the failure names it (not a node's own figure: its cause may be another task's)."""
    one = ["--cluster-set", "collectives.ops=[all_reduce]", "--cluster-set", "collectives.sizes=[64K]"]
    one += ["--cluster-set", "collectives.spread_sizes=[64K]"]
    one += ["--cluster-set", "thresholds=null"]  # the profile's bounds at other sizes
    rule = ["--cluster-set", "collectives.spread_ratio=1", "--cluster-set", "collectives.spread_floor_us=0"]
    result, folder = run_suite(
        suite, "--cluster-profile", "local-cpu", *one, *rule, "-k", "late_ranks", "tests_cluster/test_collectives.py"
    )
    assert counts(result) == {"failed": 1, "deselected": 7}, result.stdout.str()
    host = socket.gethostname()
    result.stdout.fnmatch_lines(
        [
            "collectives.late_ranks = 1 ranks, expected == 0 (profile local-cpu)",
            f"rank ? (node 0: {host}, cpu) arrived late at 1 op/size case(s):",
            "  all_reduce 64K: lateness p99 * us (mean * us); its calls median * us, p99 * us, CV *; the other "
            "ranks' median lateness p99 * us, bound 1 x * + 0 = * us",
            "verdict: FAIL; *",
        ]
    )
    data = assert_valid(folder)
    failed = next(c for t in data["tests"] for c in t["checks"] if c["verdict"] == "fail")
    assert (failed["metric"], failed["value"], failed["local"]) == ("collectives.late_ranks", 1, False)


@pytest.mark.e2e
def test_crashing_rank_fails_with_its_error(suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCEPTANCE_TEST_FAULT", "crash@1")
    result, folder = run_suite(suite, "--cluster-profile", "local-cpu", "tests_cluster/test_connectivity.py")
    result.assert_outcomes(errors=9)
    host = re.escape(socket.gethostname())
    expected = rf"probe connectivity failed: rank 1 \(host {host}, local rank 1\) raised RuntimeError: injected crash"
    assert re.search(expected, result.stdout.str()), result.stdout.str()
    data = assert_valid(folder)
    assert data["complete"] is True and data["verdict"] == "FAIL"
    (probe,) = data["probes"]
    assert probe["status"] == "failed" and "injected crash on rank 1" in probe["error"]
    assert all(t["outcome"] == "error" for t in data["tests"]) and len(data["tests"]) == 9
    assert_no_rank_alive(folder / probe["out_dir"])


@pytest.mark.e2e
def test_hanging_rank_is_killed_at_the_timeout(suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCEPTANCE_TEST_FAULT", "hang@1:barrier latency")
    start = time.monotonic()
    result, folder = run_suite(
        suite, "--cluster-profile", "local-cpu", "--cluster-timeout", "60", "tests_cluster/test_connectivity.py"
    )
    elapsed = time.monotonic() - start
    result.assert_outcomes(errors=9)
    host = re.escape(socket.gethostname())
    out = result.stdout.str()
    assert re.search(r"probe connectivity timed out after 60 s \(--cluster-timeout 60\) and was killed: ", out), out
    assert re.search(
        rf"rank 1 \(host {host}, local rank 1\) stopped progressing \d+ s ago in phase 'barrier latency'", out
    )
    # one probe, killed at 60 s (two ranks' torch imports on a loaded two-core machine must fit before the
    # hang) plus the launcher's grace period: far less than a hang that nothing ends
    assert elapsed < RUN_TIMEOUT_S
    data = assert_valid(folder)
    assert data["complete"] is True and data["verdict"] == "FAIL"
    (probe,) = data["probes"]
    assert probe["status"] == "failed" and "timed out after 60 s" in probe["error"]
    assert_no_rank_alive(folder / probe["out_dir"])


@pytest.mark.e2e
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupt_leaves_incomplete_evidence(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, sig: signal.Signals
) -> None:
    monkeypatch.setenv("ACCEPTANCE_TEST_FAULT", "hang@1")
    folder = suite.path / "evidence"
    argv = [sys.executable, "-m", "pytest", *PLUGIN_ARGS, "-p", "no:cacheprovider", "--cluster-profile",
            "local-cpu", "--cluster-evidence", str(folder), "--cluster-timeout", "240",
            f"--junitxml={suite.path / 'junit.xml'}", "tests_cluster/test_connectivity.py"]  # fmt: skip
    with subprocess.Popen(argv, cwd=suite.path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as proc:
        probe_dir = _wait_for_hang(folder, proc)
        proc.send_signal(sig)
        output, _ = proc.communicate(timeout=120)
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, output.decode()
    data = assert_valid(folder)
    assert data["complete"] is False and data["verdict"] == "INCOMPLETE"
    assert b"verdict: INCOMPLETE" in output and b"verdict: PASS" not in output
    assert [p["status"] for p in data["probes"]] == ["interrupted"]
    assert_no_rank_alive(probe_dir)
    # a pipeline reading JUnit counts sees every selected test: the running one an error, the rest skipped
    for junit in (suite.path / "junit.xml", next(folder.glob("junit-*.xml"))):
        counts = ET.parse(junit).getroot().find("testsuite")
        assert counts is not None, junit
        selected = len(data["tests"])
        assert (counts.get("tests"), counts.get("errors"), counts.get("skipped")) == (
            str(selected),
            "1",
            str(selected - 1),
        ), junit


def _properties(case: ET.Element) -> list[tuple[str | None, str | None]]:
    return [(p.get("name"), p.get("value")) for p in case.iter("property")]


def _wait_for_hang(folder: Path, proc: subprocess.Popen[bytes]) -> Path:
    """Until rank 1 sits in its injected hang (its status file names the phase), or the run ends."""
    while proc.poll() is None:
        hanging = list(folder.glob("probes/*/rank-1.json"))
        if hanging and '"phase": "start"' in hanging[0].read_text() and list(folder.glob("probes/*/rank-0.json")):
            return hanging[0].parent
        time.sleep(0.2)
    raise AssertionError(f"pytest ended before the probe hung: {proc.stdout.read() if proc.stdout else ''!r}")


CHECKS = """
def test_fails(check):
    check("connectivity.rendezvous_s", 2.5, "s", detail="rank 1 joined last")

def test_known_issue(check):
    check("connectivity.p2p_min_gbps", 0.01, "GB/s")

def test_info_and_default(check):
    # p2p_wrong: its metric's own bound (must be 0), which the profile does not set
    check.all([("connectivity.barrier_latency_us", 10.0, "us", ""), ("connectivity.p2p_wrong", 0, "elements", "")])
    check("connectivity.hosts", 1, "hosts")

def test_plain():
    assert True
"""
PROFILE = """
name: synthetic
topology: {nodes: 1, ranks_per_node: 2, device: cpu, backend: gloo}
thresholds:
  connectivity.rendezvous_s: {max: 1, source: "test"}
  connectivity.p2p_min_gbps: {min: 0.05, xfail: "slow loopback on this box"}
  connectivity.barrier_latency_us: {max: 100}
"""


def test_check_verdicts_table_and_junit(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_checks=CHECKS)
    pytester.makefile(".yaml", synthetic=PROFILE)
    junit = pytester.path / "out.xml"
    result = pytester.runpytest(*PLUGIN_ARGS, "--cluster-profile", "synthetic.yaml",
                                "--cluster-evidence", "ev", f"--junitxml={junit}")  # fmt: skip
    result.assert_outcomes(passed=2, failed=1, xfailed=1)
    result.stdout.fnmatch_lines(
        [
            "*connectivity.rendezvous_s = 2.5 s, expected <= 1 (profile synthetic)",
            "*rank 1 joined last",
            "connectivity.rendezvous_s * 2.5 * s * <= 1 * FAIL",
            "connectivity.p2p_min_gbps * 0.01 * GB/s * >= 0.05 * XFAIL",
            "connectivity.barrier_latency_us * 10 * us * <= 100 * PASS",
            "connectivity.p2p_wrong * 0 * elements * == 0 * PASS",
            "connectivity.hosts * 1 * hosts * - * INFO",
            "verdict: FAIL; * families judged; evidence: *",
        ]
    )
    data = assert_valid(pytester.path / "ev")
    outcomes = {t["nodeid"].rpartition("::")[2]: t["outcome"] for t in data["tests"]}
    assert outcomes == {"test_fails": "failed", "test_known_issue": "xfailed", "test_info_and_default": "passed"}
    cases = {c.get("name"): c for c in ET.parse(junit).getroot().iter("testcase")}
    props = {p.get("name"): p.get("value") for p in cases["test_fails"].iter("property")}
    assert props == {
        "connectivity.rendezvous_s": "2.5",
        "connectivity.rendezvous_s.unit": "s",
        "connectivity.rendezvous_s.bound": "<= 1",
        "connectivity.rendezvous_s.verdict": "fail",
        # whose fault, and what to do (the drain list's category and action)
        "category": "fabric",
        "action": "drain node",
    }
    # the plugin's own JUnit has the same cases, outcomes and properties as --junitxml
    own = ET.parse(next((pytester.path / "ev").glob("junit-*.xml"))).getroot()
    own_cases = {c.get("name"): c for c in own.iter("testcase")}
    assert {p.get("name"): p.get("value") for p in own_cases["test_fails"].iter("property")} == props
    assert own_cases["test_fails"].find("failure") is not None


def test_unchecked_threshold_fails_the_session(pytester: pytest.Pytester) -> None:
    # named like the suite's module, whose thresholds (connectivity.*) it is responsible for
    pytester.makepyfile(test_connectivity="def test_one(check):\n    check('connectivity.rendezvous_s', 0.5, 's')\n")
    pytester.makefile(".yaml", synthetic=PROFILE)
    result = pytester.runpytest(*PLUGIN_ARGS, "--cluster-profile", "synthetic.yaml", "--cluster-evidence", "ev")
    result.assert_outcomes(passed=1, failed=1)  # the failed one: the run's verdict case, for JUnit readers
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        ["thresholds no test checked [[]ERROR[]]: connectivity.barrier_latency_us, connectivity.p2p_min_gbps"]
    )
    data = assert_valid(pytester.path / "ev")
    assert data["verdict"] == "FAIL"
    assert data["errors"] == [
        "thresholds that no test checked: connectivity.barrier_latency_us, connectivity.p2p_min_gbps"
    ]


def test_unchecked_threshold_is_no_error_when_tests_are_deselected(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_connectivity="def test_one(check):\n    check('connectivity.rendezvous_s', 0.5, 's')\n"
                        "def test_two():\n    pass\n")  # fmt: skip
    pytester.makefile(".yaml", synthetic=PROFILE)
    result = pytester.runpytest(*PLUGIN_ARGS, "--cluster-profile", "synthetic.yaml", "--cluster-evidence", "ev",
                                "-k", "not test_two")  # fmt: skip
    assert result.ret == 0
    result.stdout.fnmatch_lines(["thresholds no test checked [[]not *[]]: *"])
    data = evidence(pytester.path / "ev")
    assert data["verdict"] == "PARTIAL" and data["partial"] is True
    result.stdout.fnmatch_lines(["verdict: PARTIAL: only part of the suite was selected*"])


def test_deselecting_in_one_module_leaves_the_others_enforced(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_connectivity="def test_one(check):\n    check('connectivity.rendezvous_s', 0.5, 's')\n",
        test_collectives="def test_a():\n    pass\ndef test_b():\n    pass\n",
    )
    pytester.makefile(".yaml", synthetic=PROFILE)
    result = pytester.runpytest(*PLUGIN_ARGS, "--cluster-profile", "synthetic.yaml", "--cluster-evidence", "ev",
                                "-k", "not test_b")  # fmt: skip
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    data = evidence(pytester.path / "ev")
    assert data["verdict"] == "FAIL" and data["partial"] is True
    assert data["errors"] == [
        "thresholds that no test checked: connectivity.barrier_latency_us, connectivity.p2p_min_gbps"
    ]


def test_a_run_that_selects_no_cluster_test_is_refused(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_connectivity="def test_one(check):\n    check('connectivity.rendezvous_s', 0.5, 's')\n")
    pytester.makefile(".yaml", synthetic=PROFILE)
    result = pytester.runpytest(*PLUGIN_ARGS, "--cluster-profile", "synthetic.yaml", "--cluster-evidence", "ev",
                                "-k", "conectivity")  # fmt: skip
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*no cluster test was selected, so nothing would be measured*"])
    assert not (pytester.path / "ev").exists()


def test_a_run_that_measures_nothing_is_a_fail(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_connectivity="import pytest\ndef test_one(check):\n    pytest.skip('no GPU')\n")
    pytester.makefile(".yaml", synthetic="name: synthetic\ntopology: {device: cpu, backend: gloo}\n")
    result = pytester.runpytest(*PLUGIN_ARGS, "--cluster-profile", "synthetic.yaml", "--cluster-evidence", "ev")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    data = assert_valid(pytester.path / "ev")
    assert data["verdict"] == "FAIL"
    assert data["errors"] == ["no figure was measured: every selected test was skipped or none ran"]


def test_a_short_allocation_is_refused(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(test_one="def test_one():\n    pass\n")
    pytester.makefile(".yaml", two=PROFILE.replace("name: synthetic", "name: two").replace("nodes: 1", "nodes: 2"))
    monkeypatch.setenv("NNODES", "1")
    result = pytester.runpytest(*PLUGIN_ARGS, "--cluster-profile", "two.yaml")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*profile two expects 2 node(s), but environment says 1*"])


def test_inert_without_a_profile(suite: pytest.Pytester) -> None:
    """Another project's tests run as before, one that asks for the cluster skips saying how to pick a
    profile; the acceptance suite itself is not selected."""
    suite.makepyfile(
        test_other="def test_other():\n    assert 1 + 1 == 2\n", test_needs="def test_needs(cluster):\n    pass\n"
    )
    result = suite.runpytest(*PLUGIN_ARGS, "-rs", "-p", "no:cacheprovider", "test_other.py", "test_needs.py")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED * no cluster profile selected: pass --cluster-profile NAME*"])
    result.stdout.no_fnmatch_line("cluster profile:*")
    result.stdout.no_fnmatch_line("*cluster acceptance: profile*")
    assert not (suite.path / "acceptance-results").exists()


@pytest.mark.parametrize("args", [["tests_cluster/"], [], ["tests_cluster/test_health.py", "-k", "gpu"]])
def test_the_suite_without_a_profile_is_a_usage_error_that_names_the_profiles(
    suite: pytest.Pytester, args: list[str]
) -> None:
    """A pipeline that forgot the profile must not go green on a hundred skipped tests."""
    result = suite.runpytest(*PLUGIN_ARGS, "-p", "no:cacheprovider", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*no cluster profile selected for the acceptance suite: pass --cluster-profile NAME*profiles: *local-cpu*"]
    )
    assert "Traceback" not in result.stderr.str() and not (suite.path / "acceptance-results").exists()
    listed = suite.runpytest(*PLUGIN_ARGS, "-p", "no:cacheprovider", "--collect-only", "-q", *args)
    assert listed.ret == pytest.ExitCode.OK  # listing the suite measures nothing


def test_xdist_is_refused_with_a_profile(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_one="def test_one():\n    pass\n")
    result = pytester.runpytest(*PLUGIN_ARGS, "-n", "2", "--cluster-profile", "local-cpu")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*cluster tests own every GPU of the node: run them without -n (pytest-xdist)*"])


def test_bad_profile_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_one="def test_one():\n    pass\n")
    result = pytester.runpytest(
        *PLUGIN_ARGS, "--cluster-profile", "local-cpu", "--cluster-set", "collectives.sizes=[1Q]"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--cluster-set collectives.sizes=[[]1Q[]]: collectives.sizes.0: expected a size*"])
    assert "Traceback" not in result.stderr.str() + result.stdout.str()
