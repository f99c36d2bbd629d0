"""The verdict model: PASS only for a whole, uninterrupted run that measured something and held every
gate; a subset is PARTIAL, an interruption INCOMPLETE; evidence folders are never shared or overwritten."""

from __future__ import annotations

import fcntl
import json
import signal
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from acceptance.evidence.verdict import verdict_of
from acceptance.verdicts import Facts, decide, family_word, problems
from tests.harness import PLUGIN_ARGS, counts, doc, evidence

PROFILE = "name: synthetic\ntopology: {nodes: 1, ranks_per_node: 2, device: cpu, backend: gloo}\n"
ONE_FIGURE = "def test_one(check):\n    check('connectivity.rendezvous_s', 0.5, 's')\n"


@pytest.mark.parametrize(
    ("facts", "expected"),
    [
        (Facts(outcomes=["passed"], check_verdicts=["pass", "info"]), "PASS"),
        (Facts(outcomes=["passed"], check_verdicts=["pass"], subset=True), "PARTIAL"),
        (Facts(outcomes=["passed"], check_verdicts=["pass"], interrupted=True), "INCOMPLETE"),
        (Facts(outcomes=["passed"], check_verdicts=["pass"], interrupted=True, subset=True), "INCOMPLETE"),
        (Facts(outcomes=["failed"], check_verdicts=["pass"], interrupted=True), "FAIL"),
        (Facts(outcomes=["passed"], check_verdicts=["fail"], subset=True), "FAIL"),
        (Facts(outcomes=["error"], check_verdicts=["pass"]), "FAIL"),
        (Facts(outcomes=["skipped"], check_verdicts=[]), "FAIL"),
        (Facts(outcomes=["interrupted", "not_run"], check_verdicts=[], interrupted=True), "INCOMPLETE"),
        (Facts(outcomes=["passed"], check_verdicts=["pass"], errors=["a node is missing"]), "FAIL"),
        (Facts(outcomes=["passed"], check_verdicts=["pass"], node_verdicts=["PASS", "PARTIAL"]), "PARTIAL"),
        (Facts(outcomes=["passed"], check_verdicts=["pass"], node_verdicts=["PASS", "FAIL"]), "FAIL"),
        (Facts(outcomes=["passed"], check_verdicts=["pass"], node_verdicts=["PASS", "garbled"]), "FAIL"),
    ],
)
def test_decide(facts: Facts, expected: str) -> None:
    assert decide(facts) == expected


def test_a_run_that_measured_nothing_says_why() -> None:
    assert problems(Facts(outcomes=["skipped"])) == [
        "no figure was measured: every selected test was skipped or none ran"
    ]
    assert problems(Facts(outcomes=["passed"], check_verdicts=["info"])) == []


def test_old_evidence_reads_by_the_model() -> None:
    measured = [{"outcome": "passed", "checks": [{"metric": "m", "verdict": "pass"}]}]
    assert verdict_of(doc(verdict="PASS", complete=True, partial=True, tests=measured)) == "PARTIAL"
    assert verdict_of(doc(verdict="PASS", complete=False, tests=measured)) == "INCOMPLETE"
    assert verdict_of(doc(verdict="PASS", complete=True, tests=measured)) == "PASS"
    # a stated verdict answers for what the file does not hold (another node's): it only makes it worse
    assert verdict_of(doc(verdict="FAIL", complete=True, tests=measured)) == "FAIL"
    assert verdict_of(doc(verdict="PARTIAL", complete=True, tests=measured)) == "PARTIAL"


def test_a_stated_pass_is_decided_again() -> None:
    """PASS is recomputed from what the file holds, never taken on trust."""
    assert verdict_of(doc(verdict="PASS", complete=True, tests=[])) == "FAIL"  # nothing measured
    failed = [{"outcome": "passed", "checks": [{"metric": "m", "verdict": "fail"}]}]
    assert verdict_of(doc(verdict="PASS", complete=True, tests=failed)) == "FAIL"
    measured = [{"outcome": "passed", "checks": [{"metric": "m", "verdict": "pass"}]}]
    assert verdict_of(doc(verdict="PASS", complete=True, tests=measured, errors=["a node is missing"])) == "FAIL"


def test_an_incomplete_record_stays_incomplete() -> None:
    """A run whose evidence could not be written says INCOMPLETE beside its error: not a verdict."""
    measured = [{"outcome": "passed", "checks": [{"metric": "m", "verdict": "pass"}]}]
    unwritten = doc(verdict="INCOMPLETE", complete=False, tests=measured, errors=["evidence x: cannot write"])
    assert verdict_of(unwritten) == "INCOMPLETE"
    assert decide(Facts(check_verdicts=["fail"], errors=["e"], unrecorded=True)) == "INCOMPLETE"


@pytest.mark.parametrize(
    ("outcomes", "verdicts", "word"),
    [
        (["passed"], ["pass", "info"], "PASS"),
        (["failed"], ["pass"], "FAIL"),
        (["passed"], ["baseline_fail"], "FAIL"),
        (["error"], [], "FAIL"),
        (["skipped"], ["info"], "recorded"),
        (["skipped", "skipped"], [], "skipped"),
        (["passed"], [], "passed"),
        (["running"], [], "not run"),
    ],
)
def test_a_familys_word_is_the_runs_decision_on_its_tests(outcomes: list[str], verdicts: list[str], word: str) -> None:
    assert family_word(outcomes, verdicts) == word


def test_every_reader_of_stored_evidence_reads_one_verdict() -> None:
    """A FAIL written by a run that was stopped before anything failed is the evidence of a run that judged
    nothing yet (INCOMPLETE); one that recorded a failure stays FAIL, as the merge and the report read it."""
    stopped: dict[str, object] = {"verdict": "FAIL", "complete": False}
    assert verdict_of(doc(**stopped)) == "INCOMPLETE"
    assert verdict_of(doc(**stopped, tests=[{"outcome": "failed"}])) == "FAIL"
    baseline_fail = [{"outcome": "passed", "checks": [{"metric": "m", "verdict": "baseline_fail"}]}]
    assert verdict_of(doc(**stopped, tests=baseline_fail)) == "FAIL"
    probe_failed = [{"name": "compute", "key": "compute", "status": "failed"}]
    assert verdict_of(doc(**stopped, probes=probe_failed)) == "FAIL"


def _setup(pytester: pytest.Pytester, **modules: str) -> None:
    pytester.makepyfile(**(modules or {"test_connectivity": ONE_FIGURE}))
    pytester.makefile(".yaml", synthetic=PROFILE)


def test_collect_only_measures_and_writes_nothing(pytester: pytest.Pytester) -> None:
    _setup(pytester)
    result = pytester.runpytest(*PLUGIN_ARGS, "--cluster-profile", "synthetic.yaml", "--collect-only")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["*test_one*"])
    assert not (pytester.path / "acceptance-results").exists()
    assert "verdict" not in result.stdout.str()


def test_a_folder_holding_a_run_is_kept_and_the_new_run_refused(pytester: pytest.Pytester) -> None:
    _setup(pytester)
    first = pytester.runpytest(*PLUGIN_ARGS, "--cluster-profile", "synthetic.yaml", "--cluster-evidence", "ev")
    assert first.ret == pytest.ExitCode.OK
    before = (pytester.path / "ev" / "evidence.json").read_text()
    second = pytester.runpytest(*PLUGIN_ARGS, "--cluster-profile", "synthetic.yaml", "--cluster-evidence", "ev")
    assert second.ret == pytest.ExitCode.USAGE_ERROR
    second.stderr.fnmatch_lines(
        ["*evidence folder ev already holds a run's evidence (verdict PARTIAL*never overwritten*"]
    )
    assert (pytester.path / "ev" / "evidence.json").read_text() == before


def test_a_folder_holding_other_files_is_kept_whole_and_the_run_refused(pytester: pytest.Pytester) -> None:
    """No evidence.json, but another run's files (its JUnit, its drain list): none is replaced, none
    added, and the run is refused naming the folder."""
    _setup(pytester)
    folder = pytester.path / "ev"
    folder.mkdir()
    theirs = {"junit-host.xml": "<testsuites/>", "drain.json": '{"theirs": true}'}
    for name, text in theirs.items():
        (folder / name).write_text(text)
    result = pytester.runpytest(*PLUGIN_ARGS, "--cluster-profile", "synthetic.yaml", "--cluster-evidence", "ev")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*evidence folder ev is not empty (2 entries: drain.json, junit-host.xml)*"])
    assert {p.name: p.read_text() for p in folder.iterdir()} == theirs


def test_a_host_name_holding_a_slash_names_files_it_can(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host name is part of file names (the default folder, junit-<host>.xml, a temporary file): one
    holding ``/`` (or ``..``) is written with those characters replaced, and the run goes on."""
    import socket

    _setup(pytester)
    monkeypatch.setattr(socket, "gethostname", lambda: "rack/../node 1")
    result = pytester.runpytest(*PLUGIN_ARGS, "--cluster-profile", "synthetic.yaml")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()[-2000:]
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    (folder,) = (pytester.path / "acceptance-results").iterdir()
    assert "rack_.._node_1" in folder.name
    assert (folder / "evidence.json").is_file() and (folder / "junit-rack_.._node_1.xml").is_file()


def test_an_empty_folder_given_is_used(pytester: pytest.Pytester) -> None:
    _setup(pytester)
    (pytester.path / "ev").mkdir()
    result = pytester.runpytest(*PLUGIN_ARGS, "--cluster-profile", "synthetic.yaml", "--cluster-evidence", "ev")
    assert result.ret == pytest.ExitCode.OK
    assert (pytester.path / "ev" / "evidence.json").is_file()


def test_a_folder_in_use_is_refused_with_its_holder_named(pytester: pytest.Pytester) -> None:
    _setup(pytester)
    folder = pytester.path / "ev"
    folder.mkdir()
    with open(folder / ".lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.write(json.dumps({"pid": 4242, "host": "node-7"}))
        held.flush()
        result = pytester.runpytest(*PLUGIN_ARGS, "--cluster-profile", "synthetic.yaml", "--cluster-evidence", "ev")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(['*evidence folder ev is in use by another run ({"pid": 4242, "host": "node-7"})*'])
    assert not (folder / "evidence.json").exists()


def test_a_folder_that_cannot_be_written_is_a_usage_error(pytester: pytest.Pytester) -> None:
    _setup(pytester)
    (pytester.path / "afile").write_text("not a folder")
    result = pytester.runpytest(*PLUGIN_ARGS, "--cluster-profile", "synthetic.yaml", "--cluster-evidence", "afile/ev")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*evidence folder afile/ev: cannot create or write it: Not a directory*"])
    assert "Traceback" not in result.stderr.str() + result.stdout.str()


def test_default_folders_are_never_shared(pytester: pytest.Pytester) -> None:
    _setup(pytester)
    for _ in range(2):
        assert pytester.runpytest(*PLUGIN_ARGS, "--cluster-profile", "synthetic.yaml").ret == pytest.ExitCode.OK
    folders = sorted((pytester.path / "acceptance-results").iterdir())
    assert len(folders) == 2 and all((f / "evidence.json").is_file() for f in folders)


def test_the_sigterm_handler_is_restored(pytester: pytest.Pytester) -> None:
    _setup(pytester)
    before = signal.getsignal(signal.SIGTERM)
    pytester.runpytest(*PLUGIN_ARGS, "--cluster-profile", "synthetic.yaml", "--cluster-evidence", "ev")
    assert signal.getsignal(signal.SIGTERM) is before


def test_one_marker_per_family_selects_exactly_it(pytester: pytest.Pytester) -> None:
    _setup(
        pytester,
        test_connectivity=ONE_FIGURE,
        test_health="def test_gpu(check):\n    check('health.gpu_count', 0, 'GPUs')\n",
    )
    markers = pytester.runpytest(*PLUGIN_ARGS, "--markers")
    for family in ("connectivity", "collectives", "internode", "health", "compute", "storage", "training"):
        markers.stdout.fnmatch_lines([f"@pytest.mark.{family}: the {family} family: *"])
    result = pytester.runpytest(*PLUGIN_ARGS, "--cluster-profile", "synthetic.yaml", "--cluster-evidence", "ev",
                                "-m", "health")  # fmt: skip
    # a figure without a bound is recorded, not passed
    assert result.parseoutcomes() == {"recorded": 1, "deselected": 1}
    assert [t["nodeid"] for t in evidence(pytester.path / "ev")["tests"]] == ["test_health.py::test_gpu"]


def test_options_take_command_line_then_environment_then_ini(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _setup(pytester)
    pytester.makeini("[pytest]\ncluster_profile = missing-from-ini\ncluster_evidence = from-ini\n")
    monkeypatch.setenv("CLUSTER_PROFILE", "synthetic.yaml")
    assert pytester.runpytest(*PLUGIN_ARGS).ret == pytest.ExitCode.OK
    assert (pytester.path / "from-ini" / "evidence.json").is_file()
    result = pytester.runpytest(*PLUGIN_ARGS, "--cluster-profile", "missing-from-cli")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unknown profile 'missing-from-cli'*"])


@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf", "soon"])
def test_a_bad_timeout_is_a_usage_error(pytester: pytest.Pytester, value: str) -> None:
    _setup(pytester)
    result = pytester.runpytest(*PLUGIN_ARGS, "--cluster-profile", "synthetic.yaml", f"--cluster-timeout={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*--cluster-timeout*{value}*"])


def test_evidence_lands_where_the_run_says(pytester: pytest.Pytester) -> None:
    _setup(pytester)
    pytester.runpytest(*PLUGIN_ARGS, "--cluster-profile", "synthetic.yaml", "--cluster-evidence", "ev")
    assert sorted(p.name for p in Path(pytester.path / "ev").iterdir() if not p.name.startswith(".")) == [
        "drain.json",  # the run did not PASS
        "evidence.json",
        "junit-" + __import__("socket").gethostname() + ".xml",
    ]


UNMEASURED = """
def test_held(check):
    check('connectivity.rendezvous_s', 0.5, 's', unmeasured='rendezvous_s: measured on 1 of 2 nodes, not on node 1')


def test_known_issue(check):
    check('connectivity.barrier_latency_us', 9.0, 'us', unmeasured='barrier_latency_us: not on node 1')
"""
KNOWN = "thresholds:\n  connectivity.rendezvous_s: {max: 1}\n  connectivity.barrier_latency_us: {max: 1, xfail: r}\n"


def test_units_that_measured_nothing_fail_a_check_whatever_its_verdict(pytester: pytest.Pytester) -> None:
    """A figure over the units that measured it held its bound, or missed it as a known issue: the units that
    measured nothing still fail it, named, beside the figure's own line; the judge decides so, and the
    evidence records the figure as failed, as the test is."""
    _setup(pytester, test_connectivity=UNMEASURED)
    (pytester.path / "synthetic.yaml").write_text(PROFILE + KNOWN)
    result = pytester.runpytest(*PLUGIN_ARGS, "--cluster-profile", "synthetic.yaml", "--cluster-evidence", "ev")
    assert counts(result) == {"failed": 2}
    result.stdout.fnmatch_lines(["*rendezvous_s: measured on 1 of 2 nodes, not on node 1*"])
    result.stdout.fnmatch_lines(["*connectivity.barrier_latency_us = 9 us, expected <= 1*known issue: r*"])
    verdicts = {c["metric"]: c["verdict"] for t in evidence(pytester.path / "ev")["tests"] for c in t["checks"]}
    assert verdicts == {"connectivity.rendezvous_s": "fail", "connectivity.barrier_latency_us": "fail"}


def test_a_recorded_test_passes_in_junit_and_is_counted_recorded(pytester: pytest.Pytester) -> None:
    """pytest's --junitxml shows a test whose figures have no bound as a passing case that carries
    ``cluster_outcome=recorded`` and its figures (a CI dashboard reads the run green); the terminal and the
    evidence still count it as recorded, never as a test that passed a bound."""
    _setup(pytester)
    result = pytester.runpytest(*PLUGIN_ARGS, "--cluster-profile", "synthetic.yaml", "--cluster-evidence", "ev",
                                "--junitxml", "j.xml", "-rs")  # fmt: skip
    assert counts(result) == {"recorded": 1}
    assert "SKIPPED" not in result.stdout.str()
    suite = ET.parse(pytester.path / "j.xml").getroot().find("testsuite")
    assert suite is not None and (suite.get("tests"), suite.get("skipped")) == ("1", "0")
    case = next(suite.iter("testcase"))
    assert [child.tag for child in case if child.tag in ("skipped", "failure", "error")] == []
    props = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert props["cluster_outcome"] == "recorded" and props["connectivity.rendezvous_s"] == "0.5"
    assert [t["outcome"] for t in evidence(pytester.path / "ev")["tests"]] == ["recorded"]
