"""Shared helpers for the plugin's own tests: a pytester that sees the plugin and the shipped suite."""

from __future__ import annotations

import json
import os
import shutil
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
INSTALLED = any(ep.value == "acceptance.plugin" for ep in entry_points(group="pytest11"))
# a source checkout registers the plugin through the root conftest; a pytester folder has no such file
PLUGIN_ARGS: tuple[str, ...] = () if INSTALLED else ("-p", "acceptance.plugin")


@pytest.fixture
def suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A pytester folder holding a copy of ``tests_cluster/``, whose children import this checkout."""
    shutil.copytree(ROOT / "tests_cluster", pytester.path / "tests_cluster")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    monkeypatch.delenv("CLUSTER_PROFILE", raising=False)
    monkeypatch.delenv("ACCEPTANCE_TEST_FAULT", raising=False)
    return pytester


def evidence(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "evidence.json").read_text())


def schema() -> dict[str, Any]:
    return json.loads((ROOT / "acceptance" / "evidence.schema.json").read_text())
