"""What the plugin's tests share: where the checkout is, how a pytester run loads the plugin, the evidence."""

from __future__ import annotations

import json
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
INSTALLED = any(ep.value == "acceptance.plugin" for ep in entry_points(group="pytest11"))
# a source checkout registers the plugin through the root conftest; a pytester folder has no such file
PLUGIN_ARGS: tuple[str, ...] = () if INSTALLED else ("-p", "acceptance.plugin")


def evidence(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "evidence.json").read_text())


def schema() -> dict[str, Any]:
    return json.loads((ROOT / "acceptance" / "evidence.schema.json").read_text())
