"""What the plugin's tests share: where the checkout is, how a pytester run loads the plugin, the evidence."""

from __future__ import annotations

import json
import socket
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
    return json.loads((ROOT / "acceptance" / "evidence" / "evidence.schema.json").read_text())


def free_port() -> int:
    """A rendezvous port whose successor is free too: the nodes' store listens on rendezvous port + 1."""
    for _ in range(50):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port
    raise RuntimeError("no free pair of ports")
