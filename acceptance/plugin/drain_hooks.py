"""The drain list at the session's end: written for every run that does not PASS, applied on request.

The scheduler's name for this node comes from the scheduler that drains (``acceptance.run.drain.node_name``:
Slurm's own name under Slurm, the pod's node under Kubernetes); without one the host name stands for it.
The list is on disk before any command runs and again after each, so a run stopped there (a signal, a
SIGKILL) leaves it with what its commands had done.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

from acceptance.evidence import drain
from acceptance.evidence.causes import crash_category
from acceptance.evidence.model import EvidenceDoc
from acceptance.evidence.verdict import verdict_of
from acceptance.families.gpu_users import FOREIGN_LOAD, GPU_FAULT
from acceptance.families.net_path import NODE_CONFIGURATION
from acceptance.families.transport import FORCED_BY_SETTING
from acceptance.run import drain as scheduler
from acceptance.run.cluster_run import ClusterRun
from acceptance.run.launcher import ProbeError


def categorize(call: pytest.CallInfo[None], report: pytest.TestReport, run: ClusterRun) -> None:
    """A test failed by a probe killed at its time limit is the run's setting, not the node's fault: every limit
    is one the operator chose (``--cluster-timeout``, ``--cluster-set timeouts.*``, the profile's ``timeouts``),
    and a probe that ran past it shows no fault of the node's hardware (a hung GPU shows in its own evidence:
    an XID, a health gate); its case says ``environment``, and the drain list does not drain for it. A failure
    whose figure names another process on its GPU as the cause is ``foreign load``: rerun, no drain; a
    transport mismatch that a setting of the run forced (NCCL_P2P_DISABLE) is ``environment``. The gate failed with a
    preflight's line takes that line's category."""
    cause = call.excinfo.value.__context__ if call.excinfo is not None else None
    preflight = drain.preflight_causes(run.evidence.doc)
    line = next((line for line in preflight if report.failed and line in str(report.longrepr)), None)
    if line is not None:
        # the gate failed with its preflight's line: whose fault it is was decided there (a CPU-only torch is the
        # install's), so the report and JUnit say the drain list's action, not a guess from the family
        run.evidence.test(report.nodeid).category = preflight[line]
    elif report.failed and isinstance(cause, ProbeError) and cause.timed_out:
        run.evidence.test(report.nodeid).category = "environment"
    elif report.failed and isinstance(cause, ProbeError) and (crashed := crash_category(str(cause))) is not None:
        # a rank raised: a device fault in its error or log is the hardware's; an error of the suite's own code
        # that names neither the device nor the network is no evidence against the node (review)
        run.evidence.test(report.nodeid).category = crashed
    elif report.failed and FORCED_BY_SETTING in str(report.longrepr):
        # NCCL sent a pair's traffic another way because the run's environment told it to (NCCL_P2P_DISABLE):
        # fix the setting; the node is not at fault for it
        run.evidence.test(report.nodeid).category = "environment"
    elif report.failed and NODE_CONFIGURATION in str(report.longrepr):
        # NCCL staged through host memory for want of the node's peer-memory module, or found no RDMA device:
        # the node's set-up, not its hardware (acceptance.families.net_path)
        run.evidence.test(report.nodeid).category = "configuration"
    elif report.failed and FOREIGN_LOAD in str(report.longrepr) and GPU_FAULT not in str(report.longrepr):
        # a figure slowed by another job's process on the run's GPU names it as the cause: the GPU is shared,
        # not broken (acceptance.probes.gpu_sampler); an XID or a degraded link seen as well is the GPU's own
        run.evidence.test(report.nodeid).category = "foreign load"


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM ignored for a moment (the list written after a first one): a second signal must
    not cut the file that records the first short. Only the main thread may set handlers."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in held.items():
            signal.signal(sig, handler)


def act_on(
    doc: EvidenceDoc, folder: Path, evidence: Path, way: str | None, env: Mapping[str, str] = os.environ
) -> drain.DrainList | None:
    """Write the drain list of a run that did not PASS (and apply it when ``way`` is slurm or kubernetes);
    None for a PASS. The list is written before any command runs and again as each runs and ends; a signal
    while one runs stops the commands, and the list says so (``interrupted``: the session's exit status is
    then an interrupted run's). A list that cannot be written is reported in its ``applied`` lines' place:
    the terminal shows it, the evidence is already whole. One that cannot be built is one line on stderr and
    None: the verdict and the exit status stay the run's, never a pytest INTERNALERROR."""
    if verdict_of(doc) == "PASS":
        return None
    try:
        host = doc.topology.host or socket.gethostname()
        found = drain.build(doc, evidence)  # each node by its host name until its scheduler names it
    except Exception as exc:  # a drain list that fails must leave the verdict and exit status as they are
        print(f"cluster-acceptance: no drain list for {evidence}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return None
    path: Path | None = folder / drain.FILE_NAME
    try:
        drain.write(folder, found)  # on disk before anything runs, the scheduler's name query included
    except (OSError, FileExistsError) as exc:
        found["applied"].append(f"drain list {path}: cannot write: {exc}")
        path = None  # not this run's to update
    try:
        _apply(found, host, way, env, lambda: _record(path, found))
    except KeyboardInterrupt as exc:  # SIGTERM or Ctrl-C: the list keeps what was done, and says it stopped
        with _signals_held():
            if found["interrupted"] is None:
                found["interrupted"] = scheduler.interrupted_by(exc)
                found["applied"].append(f"{way}: interrupted by {found['interrupted']}: no further command run")
            _record(path, found)
    except Exception as exc:  # a scheduler that fails must leave the verdict and exit status as they are
        found["applied"].append(f"{way}: stopped: {type(exc).__name__}: {exc}")
        _record(path, found)
    return found


def _apply(
    found: drain.DrainList, host: str, way: str | None, env: Mapping[str, str], record: Callable[[], None]
) -> None:
    """This node named as ``way``'s scheduler knows it, then, under slurm or kubernetes, its commands run; a
    run that cannot name its node runs none and says which name it needed."""
    name, why = scheduler.node_name(way or "off", host, env)
    if name is not None:
        for node in found["nodes"]:
            if node["node"] == host:
                node["scheduler_name"] = name
        record()
    if way not in scheduler.COMMANDS:
        return
    if name is None:
        found["applied"].append(why)  # which name it needed: nothing is drained under another's
        record()
        return
    scheduler.apply(found, way, record=record)


def _record(path: Path | None, found: drain.DrainList) -> None:
    """The list on disk again, with what its commands did; a write that fails is one more line of it."""
    if path is None:
        return
    try:
        drain.update(path, found)
    except OSError as exc:
        found["applied"].append(f"drain list {path}: cannot write: {exc}")
