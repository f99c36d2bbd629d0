"""The public API of the shipped suite: all that a test module in ``tests_cluster/`` imports, from here alone.

A test module asks a fixture for its family's probe result, reads figures out of it with the family's rules
and hands each to ``check``; the run's judge decides every verdict. What the suite needs of the run (its
probes, the isolation rounds, the training job) is reached through the functions here, so that the plugin
can change underneath without the suite changing (``tests/test_architecture.py`` holds the suite to it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

import pytest

from acceptance.families import fabric, transport
from acceptance.families.answers import clock_events_text
from acceptance.families.compute import COMPUTE
from acceptance.families.fabric import FABRIC
from acceptance.families.gpu_users import ForeignSeen, foreign_text
from acceptance.families.internode import INTERNODE
from acceptance.families.internode.isolation import Isolation
from acceptance.json_types import JSONObject
from acceptance.numbers import fmt
from acceptance.plugin import remeasure
from acceptance.plugin.checker import NO_PROFILE, Checker, current, probe_result, probe_wall_s, require_ranks
from acceptance.plugin.training_stage import baseline, needed
from acceptance.profile.model import ProfileModel
from acceptance.profile.references import Reference, Setup, table
from acceptance.run import fabric_readings, isolation_rounds
from acceptance.run.cluster_run import ClusterRun
from acceptance.run.launcher import ProbeError
from acceptance.run.training_jobs import baseline_run, reference_runs, strategy_runs
from acceptance.schema.bounds import Threshold
from acceptance.schema.family import Search
from acceptance.schema.figure import Figure
from acceptance.schema.results import validated

__all__ = [
    "NO_PROFILE",
    "Checker",
    "ClusterRun",
    "Figure",
    "Isolation",
    "ProbeError",
    "ProfileModel",
    "Threshold",
    "baseline_run",
    "clock_events_text",
    "collective_causes",
    "compute_figures",
    "earlier_isolation",
    "fabric_figures",
    "fmt",
    "forced_transport",
    "foreign_text",
    "internode_spec",
    "isolate_if_failing",
    "isolation_env",
    "parametrize_from_profile",
    "probe_result",
    "probe_wall_s",
    "reference_row",
    "reference_runs",
    "require_ranks",
    "tolerance_below_median",
    "training_runs",
    "transport_figure",
]


def parametrize_from_profile(
    metafunc: pytest.Metafunc,
    argname: str,
    cases: Callable[[ProfileModel], Sequence[Any]],
    ids: Callable[[Any], str] = str,
    none: str | None = None,
) -> None:
    """Parametrize ``argname`` with the profile's cases (``test_busbw[all_reduce-1G]``), so that each figure
    is its own JUnit case; without a profile, one case that skips and says how to pick one; a profile with no
    case, one that skips saying ``none`` where given (pytest's own words otherwise: an empty parameter set)."""
    if argname not in metafunc.fixturenames:
        return
    run = current(metafunc.config)
    if run is None:
        metafunc.parametrize(argname, [pytest.param(None, marks=pytest.mark.skip(reason=NO_PROFILE))])
        return
    chosen = list(cases(run.profile.model))
    if not chosen and none:
        metafunc.parametrize(argname, [pytest.param(None, marks=pytest.mark.skip(reason=none))], ids=["none"])
        return
    metafunc.parametrize(argname, chosen, ids=[ids(case) for case in chosen])


def fabric_figures(run: ClusterRun) -> fabric.FabricResult:
    """This node's ports read before any probe (beside the preflight) and now, after the network probes,
    and the figures of the two (the profile's ``fabric.counters`` are the ones watched). No stored first
    reading is none: the counters' rise is then unmeasured, never compared with the second reading itself."""
    section = FABRIC.section_of(run.profile.model)
    after = fabric_readings.read(section.sysfs_root)
    stored = run.evidence.cluster.fabric_before
    before = validated("fabric", fabric.FabricReading, stored) if stored else None
    return fabric.FabricResult(before, after, fabric.evaluate(before, after, section.counters))


def compute_figures(run: ClusterRun) -> dict[str, Any]:
    """The per-GPU speed probe's result; a figure the judge would fail is measured again before it stands
    (``compute.remeasure``)."""
    return remeasure.measured(run, COMPUTE)


def tolerance_below_median(run: ClusterRun, figure: str) -> Threshold | None:
    """The bound of ``compute.<figure>_below_median``: the profile's, else ``compute.tolerance``."""
    return run.judge.bound(f"compute.{figure}_below_median")


def training_runs(run: ClusterRun, session: pytest.Session) -> dict[str, dict[str, Any]]:
    """Every strategy the selected training tests read, and the scaling baseline, from one training job."""
    return strategy_runs(run, needed(run, session.items), baseline(run, session.items))


def reference_row(run: ClusterRun, metric: str, device_name: str) -> Reference | None:
    """The reference table's row for ``metric`` measured on GPUs named ``device_name`` (as torch names them)
    in this run's world, else None."""
    rows = table()
    setup = Setup(rows.gpu_of(device_name), run.placement.nodes, run.topology.nproc_per_node, None)
    return rows.for_figure(metric, setup)


def isolate_if_failing(run: ClusterRun, metric: str, value: float) -> Isolation | None:
    """The isolation rounds, when they are on and the judge fails the figure across nodes; else None."""
    if not (isolation_rounds.enabled(run) and run.judge.fails(metric, value)):
        return None
    return _isolation(isolation_rounds.isolate(run))


def collective_causes(
    run: ClusterRun,
    metric: str,
    value: float,
    found: transport.TransportRecord | None,
    foreign: dict[str, list[ForeignSeen]] | None,
    size_bytes: int,
    *,
    culprit: bool = False,
) -> str:
    """The causes a collective's figure past its bound names, each on a line of its own after a newline: the
    setting of the run that sent NVLink pairs another way (the drain list then blames the setting, not the node;
    for a call of ``size_bytes`` as small as ``transport.HOST_MEMORY_AS_FAST_UP_TO``, only one that sent them
    over the network), another job's process seen on a GPU (a rerun, no drain); "" for a figure within its
    bound. ``culprit``: a bandwidth's, led by where its culprit is to be found (the slowest links this run
    measured, the isolation's nodes)."""
    if not run.judge.fails(metric, value):
        return ""
    where = isolation_rounds.collective_culprit(run) if culprit else ""
    lines = (where, transport.forced(found, size_bytes), foreign_text(foreign))
    return "".join(f"\n{line}" for line in lines if line)


def isolation_env(run: ClusterRun) -> dict[str, str]:
    """The variables a probe across nodes needs for the isolation's node naming."""
    return isolation_rounds.node_env(run)


def earlier_isolation(run: ClusterRun) -> Isolation | None:
    """The isolation an earlier figure of this run started, if one did."""
    found = isolation_rounds.earlier(run)
    return None if found is None else _isolation(found)


def _isolation(found: Search) -> Isolation:
    """The internode family's isolation, as its rounds gave it (``INTERNODE.behaviour.isolation``)."""
    assert isinstance(found, Isolation), type(found).__name__
    return found


def internode_spec(run: ClusterRun, scopes: list[str]) -> dict[str, object]:
    """The internode probe's spec: the collectives' settings with the internode section's ops and sizes,
    measured in ``scopes`` (``all``, ``intranode``, ``one_gpu_per_node``)."""
    spec: dict[str, object] = dict(run.spec("collectives"))
    section = INTERNODE.section_of(run.profile.model)
    spec["collectives"] = {
        **cast(JSONObject, spec["collectives"]),
        "ops": list(section.ops),
        "sizes": list(section.sizes),
    }
    spec["scopes"] = scopes
    return spec


def transport_figure(check: Checker, metric: str, found: transport.TransportRecord | None) -> None:
    """``metric`` (``<family>.transport_mismatches``) checked as ``families.transport.figure`` gives it; the
    pair-by-transport map and the GPU-to-NIC paths go into the evidence."""
    if found is not None:
        check.measurements("transport", transport.pair_map(found["pairs"]))
        if found.get("network_paths"):
            check.measurements("network_paths", found.get("network_paths", []))
    check(transport.figure(metric, found))


def forced_transport(found: transport.TransportRecord | None) -> str:
    """The cause line of a p2p or busbw figure below its bound where a setting of the run (NCCL_P2P_DISABLE)
    sent the NVLink pairs another way (``families.transport.forced``); "" where none did."""
    return transport.forced(found)
