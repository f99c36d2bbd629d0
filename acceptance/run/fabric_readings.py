"""The fabric family's two readings of this node's ports: one before any probe (taken beside the preflight)
and one in the family's test, after the network probes. Each is ``python -m acceptance.probes.fabric`` in a
subprocess: a node's ports are read by that node's own pytest (one per node; under the srun launcher the
controller reads its own node only, and the evidence says so)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from typing import cast

from acceptance.schema.ports import FabricReading

READ_TIMEOUT_S = 30.0  # a sysfs walk takes milliseconds; a hung driver must not hang the run


def read(root: str) -> FabricReading:
    """The probe's reading; one that gave no answer (a timeout, a crash, output that is not a reading) is a
    reading without ports whose ``error`` says why: its figures are unmeasured, never a pass."""
    argv = [sys.executable, "-m", "acceptance.probes.fabric", root]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=READ_TIMEOUT_S, check=False)
        found = json.loads(done.stdout) if done.returncode == 0 else None
        if not isinstance(found, dict) or not isinstance(found.get("ports"), list):
            tail = (done.stderr.strip().splitlines() or ["no error output"])[-1]
            raise ValueError(f"exit {done.returncode}, not a reading of the ports: {tail}")
        return cast(FabricReading, found)
    except (subprocess.TimeoutExpired, ValueError, OSError) as exc:
        return {"host": socket.gethostname(), "root": root, "ports": [], "gpus": [],
                "error": f"{' '.join(argv[1:])} gave no answer: {type(exc).__name__}: {exc}"}  # fmt: skip
