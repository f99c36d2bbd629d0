"""The preflight in the session: the GPUs this node has against the profile, before any probe.

A node that lacks a GPU (or a CPU-only torch under a GPU profile) gets one line: the health family's
``gpu_count`` test fails with it, and every test of the families that start a rank per GPU is skipped
with it, instead of each failing on its own. The line is an error in the evidence, so the verdict is FAIL.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, cast

import pytest

from acceptance.json_types import JSONObject, JSONValue
from acceptance.profile.registry import FAMILIES, PROBES, WORKER_PROBES, family_of_module
from acceptance.run import fabric_readings, preflight
from acceptance.run.cluster_run import ClusterRun
from acceptance.run.launcher import ProbeError, child_env

PREFIX = "preflight: "


def run_preflight(run: ClusterRun, items: list[pytest.Item], probes: bool) -> preflight.PreflightResult | None:
    """The preflight, with the probe worker starting beside it when a selected test needs it and ``probes``
    will run (``Workers.start_early``: both import torch, seconds each); a node that fails its preflight
    ends the worker, which it cannot use."""
    # the ports' first reading, before any probe moves data over them (the family's test takes the second)
    for family in FAMILIES:
        root = family.behaviour.reads_ports
        if probes and run.persist and root is not None and any(item.path.stem == family.module for item in items):
            reading = fabric_readings.read(root(family.section_of(run.profile.model)))
            run.evidence.cluster.fabric_before = cast(JSONObject, dict(reading))  # a FabricReading is JSON
    gpu = run.topology.device == "cuda"
    # the GPUs' users before the worker's ranks put anything on them (``preflight.detect_users``)
    users = preflight.detect_users(child_env(run.profile.model.env)) if gpu else None
    served = [p for p in PROBES if p in WORKER_PROBES and any(p in _probes_of(item) for item in items)]
    if probes and run.persist and served:
        # its join limit: that of the first probe in the run's order that a worker serves
        run.workers.start_early(run.tag, run.timeout(next(p for p in PROBES if p in WORKER_PROBES)), tuple(served))
    result = preflight.injected(os.environ)
    if result is None:
        families = {f.name for item in items if (f := family_of_module(item.path.stem)) is not None}
        env = child_env(run.profile.model.env)
        result = preflight.check(run.profile.model, env, users=users, families=families)
        if result.ok and not gpu:
            return None  # a CPU profile needs no more than the compilers its tests build with
    record: dict[str, Any] = {"ok": result.ok, "message": result.message, "gpus": result.gpus}
    if not result.ok:  # whose fault: a CPU-only torch is the suite's install, and drains no node
        record["categories"] = {f"{PREFIX}{result.message}": result.category}
    if result.foreign:  # each command line whole (masked): the message names the pid and executable only
        record["foreign"] = [dict(p) for p in result.foreign]
    run.evidence.cluster.preflight = record
    if not result.ok:
        run.evidence.error(f"{PREFIX}{result.message}")
        if not result.families:  # the GPUs' families are all skipped: the worker has nothing to serve
            run.workers.close()
    run.evidence.write()
    return result


def fail_with_other_nodes(
    result: preflight.PreflightResult | None, others: Mapping[str, str], run: ClusterRun, items: list[pytest.Item]
) -> preflight.PreflightResult | None:
    """Another node failed its preflight: no probe can start there, so none starts here either; this node's
    tests are skipped and its gate fails with that node's line, instead of waiting at the first probe.
    ``others``: each other node's line, with whose fault it is (its category)."""
    if not others:
        return result
    for line in others:
        run.evidence.error(f"{PREFIX}{line}")
    mine = [result.message] if result is not None and not result.ok else []
    gpus = result.gpus if result is not None else []
    shared = preflight.PreflightResult(False, "; ".join([*mine, *others]), gpus)
    categories = {f"{PREFIX}{line}": category for line, category in others.items()}
    if result is not None and not result.ok:
        categories[f"{PREFIX}{result.message}"] = result.category
    seen = cast(list[JSONValue], gpus)  # each a SeenGpu: JSON
    run.evidence.cluster.preflight = {
        "ok": False,
        "message": shared.message,
        "gpus": seen,
        "categories": {**categories},
    }
    run.evidence.write()
    if not mine:  # a failed preflight of its own skipped them already, with its own line
        skip_without_gpus(shared, items)
    return shared


def skip_without_gpus(result: preflight.PreflightResult | None, items: list[pytest.Item]) -> None:
    if result is None or result.ok:
        return
    for item in items:
        family = family_of_module(item.path.stem)
        if family is None or item.get_closest_marker("cluster_preflight"):
            continue
        # the families the failure stops (those that build with a missing compiler), else those whose probes
        # start a rank on every GPU of the node: pointless, and noisy, without them
        if family.name in result.families if result.families else family.needs_every_gpu:
            item.add_marker(pytest.mark.skip(reason=f"preflight failed: {result.message}"))


def _probes_of(item: pytest.Item) -> tuple[str, ...]:
    family = family_of_module(item.path.stem)
    return family.probes if family is not None else ()


def fail_the_gate(result: preflight.PreflightResult | None, item: pytest.Item, run: ClusterRun) -> None:
    """The preflight's gate fails with its line, and its case takes the line's cause: the terminal, JUnit, the
    report and the drain list say the same action. A failure that stops some families only (a compiler
    missing) is no fault of the GPUs the gate counts: the gate is judged on its own figure."""
    if result is None or result.ok or result.families:
        return
    if item.get_closest_marker("cluster_preflight"):
        run.evidence.test(item.nodeid).category = result.category
        pytest.fail(f"{PREFIX}{result.message}", pytrace=False)


def shorten_repeated_probe_error(
    item: pytest.Item, call: pytest.CallInfo[None], report: pytest.TestReport, run: ClusterRun
) -> None:
    """A probe's failure in full once, in the first test it fails; one line that points there afterwards."""
    cause = call.excinfo.value.__context__ if call.excinfo is not None else None
    if not isinstance(cause, ProbeError) or not report.failed:
        return
    if cause.shown_in is None:
        cause.shown_in = item.nodeid
        return
    folder = cause.out_dir
    if folder is not None and folder.is_relative_to(run.evidence_dir):
        folder = folder.relative_to(run.evidence_dir)
    headline = str(cause).split("\n", 1)[0].split(":", 1)[0]
    report.longrepr = f"{headline}: see {cause.shown_in} above" + (f" (evidence {folder})" if folder else "")
