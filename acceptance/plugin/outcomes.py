"""A pytest report as the evidence's outcome, and the reports of tests an interruption left unrun.

After Ctrl-C or SIGTERM pytest reports only the tests that finished, so a pipeline reading JUnit counts
would see a short, green run. The test that was running becomes an error and every test that never ran
is reported skipped with the reason, through pytest's own report hook, so the terminal, ``--junitxml``
and the evidence count the same cases.
"""

from __future__ import annotations

from typing import Literal

import pytest

from acceptance.evidence.junit import INTERRUPTED, NOT_RUN, VERDICT_CASE
from acceptance.evidence.model import Check
from acceptance.evidence.store import Evidence
from acceptance.verdicts import INFORMATION, Outcome


def outcome_of(report: pytest.TestReport) -> tuple[Outcome | None, str]:
    """The evidence outcome of ``report`` (None: a passing setup or teardown) and its one-line message."""
    if hasattr(report, "wasxfail"):
        return ("xfailed" if report.skipped else "xpassed"), str(report.wasxfail)
    if report.failed:
        return ("failed" if report.when == "call" else "error"), _message(report)
    if report.skipped:
        return "skipped", _message(report)
    if is_recorded(report):
        return RECORDED, _recorded_message(report)
    return ("passed" if report.when == "call" else None), ""


RECORDED: Literal["recorded"] = (
    "recorded"  # the category and the user property of a test whose figures are all information
)
_RECORDED_PROPERTY = ("cluster_outcome", RECORDED)


def only_information(checks: list[Check]) -> bool:
    """A test that checked figures, every one without a bound: it recorded them and held no gate."""
    return bool(checks) and all(c.verdict == INFORMATION for c in checks)


def mark_recorded(item: pytest.Item, report: pytest.TestReport, checks: list[Check]) -> None:
    """Mark a passing test that checked only information as recorded. It stays a pass for pytest, so JUnit
    (pytest's --junitxml, which takes the item's properties) shows a passing case with its figures and
    ``cluster_outcome=recorded``, and a CI dashboard reads a healthy run green; the terminal counts it under
    its own word (``pytest_report_teststatus``) and the evidence as recorded, never as a pass: no gate held."""
    names = ", ".join(dict.fromkeys(c.metric for c in checks))
    report.user_properties += [_RECORDED_PROPERTY, ("cluster_recorded", names)]
    item.user_properties.append(_RECORDED_PROPERTY)


def is_recorded(report: pytest.TestReport) -> bool:
    return report.when == "call" and report.passed and _RECORDED_PROPERTY in report.user_properties


def _recorded_message(report: pytest.TestReport) -> str:
    names = dict(report.user_properties).get("cluster_recorded", "")
    return f"{RECORDED}: information only, no bound in the profile: {names}"


def _message(report: pytest.TestReport) -> str:
    if report.skipped and isinstance(report.longrepr, tuple):
        return str(report.longrepr[2]).removeprefix("Skipped: ")
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr or "")
    return text.removeprefix("Failed: ")


def report_unrun(session: pytest.Session, evidence: Evidence, finished: set[str], running: str | None) -> None:
    """Report every selected test that did not finish: the running one as an error, the rest skipped."""
    hook = session.config.hook
    for item in session.items:
        if item.nodeid in finished:
            continue
        keywords: dict[str, Literal[1]] = dict.fromkeys(item.keywords, 1)
        location = (str(item.location[0]), item.location[1], item.location[2])
        if item.nodeid == running:
            reports = [pytest.TestReport(item.nodeid, location, keywords, "failed", INTERRUPTED, "setup")]
            outcome: Outcome = "interrupted"
            message = INTERRUPTED
        else:
            longrepr = (location[0], location[1] or 0, f"Skipped: {NOT_RUN}")
            reports = [pytest.TestReport(item.nodeid, location, keywords, "skipped", longrepr, "setup")]
            outcome, message = "not_run", NOT_RUN
        reports.append(pytest.TestReport(item.nodeid, location, keywords, "passed", None, "teardown"))
        for report in reports:
            hook.pytest_runtest_logreport(report=report)
        if "cluster" in item.keywords:
            case = evidence.test(item.nodeid)
            case.outcome, case.message = outcome, message
    evidence.write()


def report_verdict(session: pytest.Session, shown: tuple[str, str, str] | None) -> None:
    """Report the run's ``verdict`` case (``junit.verdict_case``: a FAIL or an INCOMPLETE that no test
    shows) through pytest's own report hook, so the terminal's counts and ``--junitxml`` see it."""
    if shown is None:
        return
    outcome, message, text = shown
    path, _, name = VERDICT_CASE.rpartition("::")
    location = (path, None, name)
    keywords: dict[str, Literal[1]] = {name: 1, path: 1}
    longrepr = f"{message}\n{text}" if text and text != message else message
    if outcome == "failed":
        reports = [
            pytest.TestReport(VERDICT_CASE, location, keywords, "passed", None, "setup"),
            pytest.TestReport(VERDICT_CASE, location, keywords, "failed", longrepr, "call"),
        ]
    else:
        reports = [pytest.TestReport(VERDICT_CASE, location, keywords, "failed", longrepr, "setup")]
    reports.append(pytest.TestReport(VERDICT_CASE, location, keywords, "passed", None, "teardown"))
    for report in reports:
        session.config.hook.pytest_runtest_logreport(report=report)
