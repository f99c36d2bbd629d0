"""The drain list at the session's end: written for every run that does not PASS, applied on request.

The scheduler's name for this node comes from its environment: ``SLURMD_NODENAME`` (Slurm sets it for a
prolog, an epilog and every job step: slurm.conf(5) "Prolog and Epilog Scripts", srun(1) "OUTPUT
ENVIRONMENT VARIABLES"), or ``NODE_NAME`` (the Kubernetes manifests set it from the downward API,
``spec.nodeName``); else the host name is the node's name.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from acceptance.evidence import drain
from acceptance.evidence.model import EvidenceDoc
from acceptance.evidence.verdict import verdict_of
from acceptance.families.gpu_users import FOREIGN_LOAD, GPU_FAULT
from acceptance.families.transport import FORCED_BY_SETTING
from acceptance.run import drain as scheduler
from acceptance.run.cluster_run import ClusterRun
from acceptance.run.launcher import ProbeError

NAME_VARIABLES = ("SLURMD_NODENAME", "NODE_NAME")


def scheduler_names(host: str, env: Mapping[str, str] = os.environ) -> dict[str, str]:
    found = next((env[v] for v in NAME_VARIABLES if env.get(v)), None)
    return {host: found} if found else {}


def categorize(call: pytest.CallInfo[None], report: pytest.TestReport, run: ClusterRun) -> None:
    """A test failed by a probe killed at a time limit the operator gave (``--cluster-timeout``) is the run's
    setting, not the node's fault: its case says ``environment``, and the drain list does not drain for it.
    A probe killed at the profile's own limit stays the node's (a hung GPU or link). A failure whose figure
    names another process on its GPU as the cause is ``foreign load``: rerun, no drain; a transport mismatch that a
    setting of the run forced (NCCL_P2P_DISABLE) is ``environment``. The gate failed with a preflight's line
    takes that line's category."""
    cause = call.excinfo.value.__context__ if call.excinfo is not None else None
    preflight = drain.preflight_causes(run.evidence.doc)
    line = next((line for line in preflight if report.failed and line in str(report.longrepr)), None)
    if line is not None:
        # the gate failed with its preflight's line: whose fault it is was decided there (a CPU-only torch is the
        # install's), so the report and JUnit say the drain list's action, not a guess from the family
        run.evidence.test(report.nodeid).category = preflight[line]
    elif report.failed and isinstance(cause, ProbeError) and cause.timed_out and run.timeout_override is not None:
        run.evidence.test(report.nodeid).category = "environment"
    elif report.failed and FORCED_BY_SETTING in str(report.longrepr):
        # NCCL sent a pair's traffic another way because the run's environment told it to (NCCL_P2P_DISABLE):
        # fix the setting; the node is not at fault for it
        run.evidence.test(report.nodeid).category = "environment"
    elif report.failed and FOREIGN_LOAD in str(report.longrepr) and GPU_FAULT not in str(report.longrepr):
        # a figure slowed by another job's process on the run's GPU names it as the cause: the GPU is shared,
        # not broken (acceptance.probes.gpu_sampler); an XID or a degraded link seen as well is the GPU's own
        run.evidence.test(report.nodeid).category = "foreign load"


def act_on(doc: EvidenceDoc, folder: Path, evidence: Path, way: str | None) -> drain.DrainList | None:
    """Write the drain list of a run that did not PASS (and apply it when ``way`` is slurm or kubernetes);
    None for a PASS. A list that cannot be written is reported in its ``applied`` lines' place: the
    terminal shows it, the evidence is already whole. One that cannot be built (or applied) is one line on
    stderr and None: the verdict and the exit status stay the run's, never a pytest INTERNALERROR."""
    if verdict_of(doc) == "PASS":
        return None
    try:
        host = doc.topology.host or socket.gethostname()
        found = drain.build(doc, evidence, scheduler_names(host))
        if way in scheduler.COMMANDS:
            found["applied"] = scheduler.apply(found, way)
    except Exception as exc:  # a drain list that fails must leave the verdict and exit status as they are
        print(f"cluster-acceptance: no drain list for {evidence}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return None
    try:
        drain.write(folder, found)
    except (OSError, FileExistsError) as exc:
        found["applied"].append(f"drain list {folder / drain.FILE_NAME}: cannot write: {exc}")
    return found
