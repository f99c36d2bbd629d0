"""JUnit XML from an evidence document, the same cases and properties pytest's ``--junitxml`` gets.

A pipeline that reads JUnit counts must never see green when the verdict is not PASS: a test that was
running when the run stopped is an error, a test that never ran is skipped with the reason, and the
suite's properties carry the verdict. A FAIL or an INCOMPLETE that no case shows (thresholds no test
checked, a node missing, a run killed between tests) is one more case, ``cluster-acceptance::verdict``:
failed with the run's errors for a FAIL, an error for an INCOMPLETE. A PARTIAL adds no case: every gate
that was selected held, and the ``verdict`` property says PARTIAL. Every checked figure is a property of
its case, named like in ``--junitxml``: ``METRIC`` (the value), ``METRIC.unit``, ``METRIC.bound``,
``METRIC.verdict``. A test whose figures all lack a bound (recorded: information only) is a passing case with
the property ``cluster_outcome=recorded``, so a healthy run reads green where a dashboard counts skips.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from typing import Any

from acceptance.evidence.drain import cause_of
from acceptance.evidence.model import Case, EvidenceDoc
from acceptance.evidence.store import as_data, finite
from acceptance.evidence.verdict import verdict_of
from acceptance.masking import masked_record
from acceptance.verdicts import FAILED_OUTCOMES, Outcome, RunVerdict

PASSED = ("passed", "xpassed")  # xpassed: a known issue that did not show; strict xfail makes it a failure
INTERRUPTED = "did not finish: the run was interrupted"
NOT_RUN = "not run: the run was interrupted before this test"
# the case that carries a FAIL or an INCOMPLETE no test shows, here and in pytest's own --junitxml
VERDICT_CASE = "cluster-acceptance::verdict"
ERROR_OUTCOMES: tuple[Outcome, ...] = ("error", "interrupted", "running")
# what XML 1.0 cannot hold, even as a character reference: C0 controls but tab and newlines (an ESC of a
# terminal colour in a storage path), lone surrogates, U+FFFE/U+FFFF; Expat rejects a document holding one
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def xml_safe(value: Any) -> Any:
    """``value`` with every character XML cannot hold written as its escape (ESC as ``\\x1b``), recursively."""
    if isinstance(value, str):
        return _NOT_XML.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), value)
    if isinstance(value, Mapping):
        return {xml_safe(key): xml_safe(item) for key, item in value.items()}
    if isinstance(value, list):
        return [xml_safe(item) for item in value]
    return value


def _shown(value: Any) -> str:
    return "not a number" if value is None else str(value)


def figure_properties(metric: str, value: Any, unit: str, bound: str, verdict: str) -> list[tuple[str, str]]:
    """The properties one checked figure adds to its JUnit case (here and in the plugin's --junitxml)."""
    return [
        (metric, _shown(value)),
        (f"{metric}.unit", unit),
        (f"{metric}.bound", bound or "none"),
        (f"{metric}.verdict", verdict),
    ]


def junit_xml(doc: EvidenceDoc, suite_name: str | None = None) -> str:
    """JUnit XML for an evidence document; its verdict is decided again from what it holds (``verdict_of``).
    Whatever text the document holds, the XML is well-formed (``xml_safe``)."""
    from junit_xml import TestSuite

    # a NaN duration or value, an ESC in a message must not reach the XML: a CI's parser would fail on it;
    # and a secret an older evidence file still holds (a URL's password in an error) is masked, as reports do
    doc = EvidenceDoc.model_validate(xml_safe(finite(masked_record(as_data(doc)))))
    verdict = verdict_of(doc)  # a killed run's stored FAIL reads INCOMPLETE here as in the report
    props = {
        "profile": doc.profile.name,
        "profile_sha256": doc.profile.sha256,
        "verdict": verdict,
        "complete": doc.complete,
        "partial": doc.partial,
    }
    tests = list(doc.tests)
    if not doc.complete:
        # a killed run recorded the tests that started; the rest of its selection never ran
        seen = {t.nodeid for t in tests}
        tests += [Case(nodeid=n, outcome="not_run") for n in doc.selected if n not in seen]
    cases = [_case(test) for test in tests]
    shown = verdict_case(doc, verdict)
    if shown is not None:
        cases.append(_verdict_case(*shown))
    suite = TestSuite(
        suite_name or f"cluster-acceptance[{doc.profile.name}]",
        cases,
        hostname=doc.topology.host,
        properties=props,
        timestamp=doc.started,
    )
    root = ET.Element("testsuites")
    element = suite.build_xml_doc()
    for case_element, test in zip(element.iter("testcase"), tests, strict=False):  # the verdict case: none
        _add_properties(case_element, test)
    root.append(element)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def verdict_case(doc: EvidenceDoc, verdict: RunVerdict) -> tuple[str, str, str] | None:
    """The ``verdict`` case a FAIL or an INCOMPLETE needs, as (outcome, message, text), else None: a FAIL
    that no failed case shows, an INCOMPLETE that no errored case shows. Where a case shows it already, one
    more would only count the same verdict twice; the run's errors are in the evidence and the summary."""
    errors = list(doc.errors)
    shown = any(t.outcome in FAILED_OUTCOMES + ERROR_OUTCOMES for t in doc.tests)
    if verdict == "FAIL" and not shown:
        why = "; ".join(e.splitlines()[0] for e in errors) or "a node's verdict or a check failed; see the evidence"
        return "failed", f"verdict FAIL: {why}", "\n".join(errors)
    if verdict == "INCOMPLETE" and not shown:
        why = "; ".join(e.splitlines()[0] for e in errors) or "the run stopped before its end"
        return "error", f"verdict INCOMPLETE: {why}; not a verdict on the cluster", "\n".join(errors)
    return None


def _verdict_case(outcome: str, message: str, text: str) -> Any:
    from junit_xml import TestCase

    classname, _, name = VERDICT_CASE.rpartition("::")
    case = TestCase(name, classname=classname, elapsed_sec=0.0)
    if outcome == "failed":
        case.add_failure_info(message=message, output=text or None)
    else:
        case.add_error_info(message=message, output=text or None)
    return case


def _case(test: Case) -> Any:
    from junit_xml import TestCase

    classname, _, name = test.nodeid.rpartition("::")
    lines = [f"{c.metric} = {_shown(c.value)} {c.unit} [{c.bound or 'no bound'}] {c.verdict}" for c in test.checks]
    case = TestCase(
        name or test.nodeid,
        classname=classname.replace("/", ".").removesuffix(".py"),
        elapsed_sec=test.duration_s or 0.0,
        stdout="\n".join(lines) or None,  # the same figures for a person reading the CI's test view
    )
    outcome, message, longrepr = test.outcome, test.message, test.longrepr
    if outcome == "failed":
        case.add_failure_info(message=message or "failed", output=longrepr)
    elif outcome == "error":
        case.add_error_info(message=message or "error", output=longrepr)
    elif outcome in ("skipped", "xfailed"):
        case.add_skipped_info(message=message or outcome)
    elif outcome == "not_run":
        case.add_skipped_info(message=message or NOT_RUN)
    elif outcome in ("running", "interrupted"):
        # the evidence was written before the test ended: a killed run must not read as a pass
        case.add_error_info(message=INTERRUPTED, output=longrepr)
    elif outcome not in (*PASSED, "recorded"):  # recorded: a passing case marked so (_add_properties)
        case.add_error_info(message=f"{INTERRUPTED} (outcome {outcome!r})", output=longrepr)
    return case


def _add_properties(element: ET.Element, test: Case) -> None:
    pairs = [pair for c in test.checks for pair in figure_properties(c.metric, c.value, c.unit, c.bound, c.verdict)]
    if test.outcome == "recorded":  # information only: no gate held, as pytest's --junitxml marks it
        pairs.insert(0, ("cluster_outcome", "recorded"))
    if test.outcome in FAILED_OUTCOMES:  # whose fault, and what to do: what a pipeline routes a failure by
        category, action = cause_of(test)
        pairs += [("category", category), ("action", action)]
    if not pairs:
        return
    properties = ET.Element("properties")
    for name, value in pairs:
        ET.SubElement(properties, "property", name=name, value=value)
    element.insert(0, properties)
