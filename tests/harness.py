"""What the plugin's tests share: where the checkout is, how a pytester run loads the plugin, the evidence."""

from __future__ import annotations

import json
import os
import random
import socket
from importlib.metadata import entry_points
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from acceptance.evidence.model import EvidenceDoc

ROOT = Path(__file__).resolve().parent.parent
# GPU evidence trimmed for the tests: every check, test and verdict as recorded; the full figures are on
# docs/measurements.md. h200-x2 and h100-x1 are the reference runs, kept whole.
EVIDENCE = ROOT / "tests" / "data" / "evidence"
INSTALLED = any(ep.value == "acceptance.plugin" for ep in entry_points(group="pytest11"))
# a source checkout registers the plugin through the root conftest; a pytester folder has no such file
PLUGIN_ARGS: tuple[str, ...] = () if INSTALLED else ("-p", "acceptance.plugin")


def evidence(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "evidence.json").read_text())


# what a document needs beside the fields a test is about: the model requires a profile and a topology
_PROFILE = {"name": "synthetic", "path": "synthetic.yaml", "sha256": "0" * 64, "resolved": {}}
_TOPOLOGY = {"nodes": 1, "node_rank": 0, "head": "localhost", "source": "test", "ranks_per_node": 1,
             "world_size": 1, "host": "localhost"}  # fmt: skip
_CHECK = {"unit": "", "bound": "", "threshold": None, "value": None}


def doc(**fields: Any) -> EvidenceDoc:
    """An evidence document with the fields a test names; the profile, topology and each check's fields it
    leaves out are filled in (the profile and topology field by field)."""
    data: dict[str, Any] = {"started": "2026-01-01T00:00:00+00:00", **fields}
    data["profile"] = {**_PROFILE, **(fields.get("profile") or {})}
    data["topology"] = {**_TOPOLOGY, **(fields.get("topology") or {})}
    data["tests"] = [
        {"nodeid": "test_x.py::test", **t, "checks": [{**_CHECK, **c} for c in t.get("checks") or []]}
        for t in fields.get("tests") or []
    ]
    data["probes"] = [{"name": p.get("key"), "key": p.get("name"), **p} for p in fields.get("probes") or []]
    return EvidenceDoc.model_validate(data)


def schema() -> dict[str, Any]:
    return json.loads((ROOT / "acceptance" / "evidence" / "evidence.schema.json").read_text())


PORTS_BOTTOM, PORTS_TOP = 20000, 32767  # under Linux's default ip_local_port_range, above the well-known ports


def free_port() -> int:
    """A rendezvous port whose successor is free too: the nodes' store listens on rendezvous port + 1.

    Drawn below the kernel's range for outgoing connections (``ip_local_port_range``, 32768 up by default):
    a port that ``bind(0)`` hands out is one the kernel may give any other test's connection in the seconds
    before the node binds it. Each xdist worker draws from its own share, so two never pick one port."""
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
    share = (PORTS_TOP - PORTS_BOTTOM) // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    low = PORTS_BOTTOM + worker * share
    for _ in range(50):
        port = random.randrange(low, low + share - 1)
        try:
            for candidate in (port, port + 1):
                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", candidate))
        except OSError:
            continue
        return port
    raise RuntimeError("no free pair of ports")


def counts(result: pytest.RunResult) -> dict[str, int]:
    """A pytester run's outcome counts as its last line gives them, ``recorded`` among them (a test whose
    figures all lack a bound: information, not a pass), which ``assert_outcomes`` does not know."""
    return {k: v for k, v in result.parseoutcomes().items() if k not in ("warnings", "warning")}


def categorized(run: Any, nodeid: str, message: str) -> dict[str, str | None]:
    """The categories ``drain_hooks.categorize`` gives the test ``nodeid`` of ``run`` that failed with ``message``
    ("" for a pass), by node id: empty where it gave none."""
    from acceptance.plugin import drain_hooks

    cases: dict[str, SimpleNamespace] = {}
    evidence = SimpleNamespace(
        test=lambda nodeid: cases.setdefault(nodeid, SimpleNamespace(category=None)), doc=run.evidence.doc
    )
    report = SimpleNamespace(failed=bool(message), longrepr=message, nodeid=nodeid)
    drain_hooks.categorize(SimpleNamespace(excinfo=None), report, SimpleNamespace(evidence=evidence))  # type: ignore[arg-type]
    return {key: case.category for key, case in cases.items()}


def collected(suite: pytest.Pytester, *args: str, timeout: float) -> list[str]:
    """The node ids a local-cpu run with ``args`` selects (``--collect-only``: nothing runs)."""
    result = suite.runpytest_subprocess(
        *PLUGIN_ARGS, "-p", "no:cacheprovider", "--cluster-profile", "local-cpu", "--collect-only", "-q", *args,
        timeout=timeout,
    )  # fmt: skip
    return [line for line in result.outlines if "::" in line]
