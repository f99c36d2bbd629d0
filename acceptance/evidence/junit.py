"""JUnit XML from an evidence document, the same cases and properties pytest's ``--junitxml`` gets.

A pipeline that reads JUnit counts must never see green when the verdict is not PASS: a test that was
running when the run stopped is an error, a test that never ran is skipped with the reason, and the
suite's properties carry the verdict. Every checked figure is a property of its case, named like in
``--junitxml``: ``METRIC`` (the value), ``METRIC.unit``, ``METRIC.bound``, ``METRIC.verdict``.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Mapping
from typing import Any

from acceptance.evidence.store import finite

PASSED = ("passed", "xpassed")  # xpassed: a known issue that did not show; strict xfail makes it a failure
INTERRUPTED = "did not finish: the run was interrupted"
NOT_RUN = "not run: the run was interrupted before this test"


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


def junit_xml(data: Mapping[str, Any], suite_name: str | None = None) -> str:
    """JUnit XML for an evidence document (plain data, as ``read_evidence`` gives it)."""
    from junit_xml import TestSuite

    data = finite(data)  # a NaN duration or value must not reach the XML as "nan"
    profile = data.get("profile") or {}
    props = {
        "profile": profile.get("name"),
        "profile_sha256": profile.get("sha256"),
        "verdict": data.get("verdict"),
        "complete": data.get("complete"),
        "partial": data.get("partial", False),
    }
    tests = data.get("tests", [])
    suite = TestSuite(
        suite_name or f"cluster-acceptance[{profile.get('name')}]",
        [_case(test) for test in tests],
        hostname=(data.get("topology") or {}).get("host", ""),
        properties=props,
        timestamp=data.get("started"),
    )
    root = ET.Element("testsuites")
    element = suite.build_xml_doc()
    for case_element, test in zip(element.iter("testcase"), tests, strict=True):
        _add_properties(case_element, test)
    root.append(element)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def _case(test: Mapping[str, Any]) -> Any:
    from junit_xml import TestCase

    classname, _, name = test["nodeid"].rpartition("::")
    lines = [
        f"{c['metric']} = {_shown(c['value'])} {c.get('unit', '')} [{c.get('bound') or 'no bound'}] {c['verdict']}"
        for c in test.get("checks", [])
    ]
    case = TestCase(
        name or test["nodeid"],
        classname=classname.replace("/", ".").removesuffix(".py"),
        elapsed_sec=test.get("duration_s") or 0.0,
        stdout="\n".join(lines) or None,  # the same figures for a person reading the CI's test view
    )
    outcome, message, longrepr = test.get("outcome"), test.get("message"), test.get("longrepr")
    if outcome == "failed":
        case.add_failure_info(message=message or "failed", output=longrepr)
    elif outcome == "error":
        case.add_error_info(message=message or "error", output=longrepr)
    elif outcome in ("skipped", "xfailed", "recorded"):  # recorded: information only, never a pass
        case.add_skipped_info(message=message or outcome)
    elif outcome == "not_run":
        case.add_skipped_info(message=message or NOT_RUN)
    elif outcome in ("running", "interrupted"):
        # the evidence was written before the test ended: a killed run must not read as a pass
        case.add_error_info(message=INTERRUPTED, output=longrepr)
    elif outcome not in PASSED:
        case.add_error_info(message=f"{INTERRUPTED} (outcome {outcome!r})", output=longrepr)
    return case


def _add_properties(element: ET.Element, test: Mapping[str, Any]) -> None:
    pairs = [
        pair
        for c in test.get("checks", [])
        for pair in figure_properties(c["metric"], c["value"], c.get("unit", ""), c.get("bound", ""), c["verdict"])
    ]
    if not pairs:
        return
    properties = ET.Element("properties")
    for name, value in pairs:
        ET.SubElement(properties, "property", name=name, value=value)
    element.insert(0, properties)
