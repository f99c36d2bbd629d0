"""Fixtures for the plugin's own tests."""

from __future__ import annotations

import os
import platform
import shutil
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from acceptance.reports import plots
from tests.harness import ROOT

# platform.processor() runs `uname -p` once per interpreter and caches it; the evidence records the platform.
# Asked here, so that the guard below sees only the processes a test starts itself, whatever ran first.
platform.platform()

# The interrupt tests send SIGINT to a pytest they start, which inherits this process's disposition of the
# signal: a caller that ignores it (a background job of a non-interactive shell does) would hand SIG_IGN on,
# and the pytest under test would never see the Ctrl-C. A handled signal is reset to its default on exec.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN and threading.current_thread() is threading.main_thread():
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def _fast_tier_starts_no_process(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fast tier (``-m "not e2e"``) starts no process: a test that starts one through ``subprocess`` (as
    pytester's subprocess runs, torchrun and Chromium are started here) must be marked ``e2e``."""
    if request.node.get_closest_marker("e2e"):
        return

    def refuse(self: subprocess.Popen[Any], args: Any = None, *rest: Any, **options: Any) -> None:
        raise AssertionError(f"this test starts a process ({args!r}) but is not marked e2e: the fast tier starts none")

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)
    # the sessions it runs in its own process measure nothing, and a session starts its probe worker (a
    # process) beside its preflight as soon as it has selected a test of a family that the worker runs
    monkeypatch.setenv("CLUSTER_WORKER", "off")


@pytest.fixture
def suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A pytester folder holding a copy of ``tests_cluster/``, whose children import this checkout."""
    shutil.copytree(ROOT / "tests_cluster", pytester.path / "tests_cluster")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    monkeypatch.delenv("CLUSTER_PROFILE", raising=False)
    monkeypatch.delenv("ACCEPTANCE_TEST_FAULT", raising=False)
    return pytester


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory with its own ``thresholds/`` folder, which is searched before the shipped one."""
    (tmp_path / "thresholds").mkdir()
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def no_plots(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reports drawn without their plots, as where matplotlib is not installed: a test of a report's words, files
    or outputs need not draw them (matplotlib's layout is most of a report's time); the plots have tests of their
    own (``test_report.py``, ``test_report_browser.py``)."""
    monkeypatch.setattr(plots, "available", lambda: False)
