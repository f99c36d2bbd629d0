"""The pytest side: options, profile loading, fixtures, the header, the verdict table and the evidence.

Without ``--cluster-profile`` (or ``CLUSTER_PROFILE``) the plugin is inert: other projects' tests run
as before, and tests that ask for the ``cluster`` fixture skip with a reason that says how to pick one.
"""

from __future__ import annotations

import datetime
import os
import signal
import socket
import threading
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

import acceptance
from acceptance.evidence.document import junit_xml, write_atomic
from acceptance.multinode import plan
from acceptance.profile import loader as profiles
from acceptance.profile.metrics import module_of
from acceptance.profile.model import Threshold
from acceptance.run.cluster_run import MUST_BE_ZERO as MUST_BE_ZERO  # re-exported for test modules
from acceptance.run.cluster_run import ClusterRun, fmt
from acceptance.run.launcher import ProbeError
from acceptance.run.placement import TopologyError, resolve

RUN_KEY = pytest.StashKey[ClusterRun]()
NO_PROFILE = (
    "no cluster profile selected: pass --cluster-profile NAME (or set CLUSTER_PROFILE); "
    "`cluster-acceptance list` shows the profiles, local-cpu runs on any machine"
)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("cluster", "cluster acceptance")
    group.addoption(
        "--cluster-profile",
        default=os.environ.get("CLUSTER_PROFILE"),
        help="profile name or YAML path (default: $CLUSTER_PROFILE; none: the plugin stays inert)",
    )
    group.addoption(
        "--cluster-evidence",
        type=Path,
        default=None,
        help="evidence folder (default: a new folder under ./acceptance-results/)",
    )
    group.addoption(
        "--cluster-set",
        action="append",
        default=[],
        metavar="KEY.PATH=VALUE",
        help="override one profile key for this run, e.g. training.micro_batch=8 (repeatable; "
        "validated like the file; default: none)",
    )
    group.addoption(
        "--cluster-timeout",
        type=float,
        default=None,
        help="seconds per probe run, overriding the profile's timeouts (default: the profile's)",
    )
    group.addoption(
        "--cluster-nodes",
        type=int,
        default=None,
        help="number of nodes (default: from Slurm, Kubernetes, NNODES, or the profile)",
    )
    group.addoption(
        "--cluster-node-rank",
        type=int,
        default=None,
        help="this node's rank (default: from SLURM_NODEID, JOB_COMPLETION_INDEX, NODE_RANK, or 0)",
    )
    group.addoption(
        "--cluster-head",
        default=None,
        help="rendezvous head HOST[:PORT] (default: first Slurm node, CLUSTER_HEAD, MASTER_ADDR, "
        "or 127.0.0.1; port: MASTER_PORT or the profile's rdzv_port)",
    )


def _interrupt_on_term(signum: int, frame: object) -> None:
    # SIGTERM (a CI job cancelled, a pod evicted) unwinds like Ctrl-C: the launcher kills the probe's
    # process groups and the evidence is written, marked incomplete
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "cluster: an acceptance test that runs probes on the cluster")
    name = config.getoption("cluster_profile")
    if not name:
        return
    if (config.getoption("numprocesses", None) or 0) not in (0, "0") and not hasattr(config, "workerinput"):
        raise pytest.UsageError(
            "cluster tests own every GPU of the node: run them without -n (pytest-xdist); "
            "xdist is for the plugin's own tests"
        )
    try:
        profile = profiles.load(name, config.getoption("cluster_set"))
        topo = profile.model.topology
        placement = resolve(
            os.environ,
            topo.nodes,
            nodes=config.getoption("cluster_nodes"),
            node_rank=config.getoption("cluster_node_rank"),
            head=config.getoption("cluster_head"),
            default_port=topo.rdzv_port,
            launcher=topo.launcher,
        )
        if placement.nodes != topo.nodes:
            # a 2x8 acceptance profile must never pass on one node because the allocation came out short
            raise TopologyError(
                f"profile {profile.name} expects {topo.nodes} node(s), but {placement.source} says "
                f"{placement.nodes}: fix the allocation, or pass --cluster-set topology.nodes={placement.nodes} "
                "to accept another size on purpose"
            )
    except (profiles.ProfileError, TopologyError) as exc:
        raise pytest.UsageError(str(exc)) from None
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt_on_term)
    folder = config.getoption("cluster_evidence") or _default_folder(profile.name, placement.node_rank)
    if _meets(placement.nodes, topo.launcher) and config.getoption("cluster_evidence"):
        # one pytest per node may share the folder (a shared filesystem, one volume): one subfolder each
        folder = Path(folder) / f"node{placement.node_rank}-{socket.gethostname()}"
    config.stash[RUN_KEY] = ClusterRun(
        profile,
        placement,
        Path(folder),
        config.getoption("cluster_timeout"),
        run_tag=os.environ.get("CLUSTER_RUN_ID", ""),
    )


def _meets(nodes: int, launcher: str) -> bool:
    """One pytest per node: the nodes must agree on the plan (the srun controller is a single pytest)."""
    return nodes > 1 and launcher == "torchrun"


def _default_folder(profile: str, node_rank: int) -> Path:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("acceptance-results") / f"{stamp}-{profile}-{socket.gethostname()}-node{node_rank}"


def current(config: pytest.Config) -> ClusterRun | None:
    return config.stash.get(RUN_KEY, None)


def pytest_report_header(config: pytest.Config) -> list[str]:
    run = current(config)
    if run is None:
        return []
    p, place, topo = run.profile, run.placement, run.topology
    return [
        f"cluster-acceptance {acceptance.__version__} ({Path(acceptance.__file__).parent})",
        f"cluster profile: {p.name} ({p.path}) sha256 {p.sha256[:16]}",
        f"cluster topology: {place.nodes} node(s) x {topo.nproc_per_node} rank(s), {topo.device}/{topo.backend}, "
        f"node rank {place.node_rank}, head {place.endpoint} (from {place.source})",
        f"cluster evidence: {run.evidence_dir}",
    ] + (
        [f"cluster plan: the nodes meet at {place.head}:{place.port + plan.STORE_PORT_OFFSET} after collection"]
        if _meets(place.nodes, topo.launcher)
        else []
    )


@pytest.fixture(scope="session")
def cluster(request: pytest.FixtureRequest) -> ClusterRun:
    run = current(request.config)
    if run is None:
        pytest.skip(NO_PROFILE)
    return run


def probe_result(
    run: ClusterRun,
    name: str,
    spec: dict[str, Any] | None = None,
    key: str | None = None,
    env: dict[str, str] | None = None,
    ranks_per_node: int | None = None,
    nodes: int | None = None,
) -> dict[str, Any]:
    """A probe's result for a fixture, its failure as the test's error (with the failing rank's log tail).
    ``env``, ``ranks_per_node``, ``nodes``: as in ``ClusterRun.probe``."""
    try:
        return run.probe(name, spec, key, env, ranks_per_node, nodes)
    except ProbeError as exc:
        pytest.fail(str(exc), pytrace=False)


def probe_wall_s(run: ClusterRun, key: str) -> float:
    """A probe's wall time as the launcher measured it: torch import and rendezvous included."""
    runs = [p for p in run.evidence.data["probes"] if p["key"] == key and "wall_s" in p]
    if not runs:
        pytest.fail(f"no finished {key} probe in this session's evidence", pytrace=False)
    return float(runs[-1]["wall_s"])


def require_ranks(run: ClusterRun, at_least: int, what: str) -> None:
    if run.world_size < at_least:
        pytest.skip(
            f"{what} needs at least {at_least} ranks; profile {run.profile.name} has {run.world_size} "
            f"({run.placement.nodes} node(s) x {run.topology.nproc_per_node})"
        )


class Checker:
    """``check(metric, value, unit)``: bound the figure by the profile, record it, fail with one line."""

    def __init__(self, run: ClusterRun, item: pytest.Item) -> None:
        self.run, self.item = run, item

    def __call__(
        self, metric: str, value: float, unit: str, detail: str = "", default: Threshold | None = None
    ) -> None:
        self.all([(metric, value, unit, detail)], default=default)

    def all(self, figures: list[tuple[str, float, str, str]], default: Threshold | None = None) -> None:
        """Check several figures; fail once, listing every figure out of bounds."""
        failures, xfails = [], []
        for metric, value, unit, detail in figures:
            result = self.run.check(self.item.nodeid, metric, value, unit, detail, default)
            # what the record_property fixture does, without its warning under the default junit_family xunit2
            self.item.user_properties.append((metric, value))
            if result.verdict == "fail":
                failures.append(result.message)
            elif result.verdict == "xfail":
                xfails.append(f"{result.message} [known issue: {result.xfail_reason}]")
        self.run.evidence.write()
        if failures:
            pytest.fail("\n".join(failures), pytrace=False)
        if xfails:
            pytest.xfail("\n".join(xfails))

    def measurements(self, key: str, data: Any) -> None:
        """Attach a table (a sweep, a per-GPU list) to this test's evidence."""
        self.run.evidence.test(self.item.nodeid)["measurements"][key] = data


@pytest.fixture
def check(cluster: ClusterRun, request: pytest.FixtureRequest) -> Checker:
    return Checker(cluster, request.node)


_DESELECTED_MODULES = pytest.StashKey[set[str]]()
_SELECTED_MODULES = pytest.StashKey[set[str]]()


def _module(item: pytest.Item) -> str:
    return Path(item.nodeid.split("::")[0]).stem


def pytest_collection_finish(session: pytest.Session) -> None:
    # A threshold is enforced when its family's module was selected whole: running one module on purpose
    # must not fail for the others' thresholds, but a selected module must check every one of its own.
    session.config.stash[_SELECTED_MODULES] = {_module(i) for i in session.items}
    _meet(session)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.cluster)


def _meet(session: pytest.Session) -> None:
    """One pytest per node: the nodes agree on the plan before any probe starts (see ``plan``)."""
    run = current(session.config)
    if run is None or session.config.option.collectonly or not _meets(run.placement.nodes, run.topology.launcher):
        return
    try:
        plan.meet(run, [item.nodeid for item in session.items])
    except plan.PlanError as exc:
        run.evidence.data["errors"].append(str(exc))
        raise pytest.UsageError(str(exc)) from None


def pytest_deselected(items: list[pytest.Item]) -> None:
    if items:
        config = items[0].config
        config.stash[_DESELECTED_MODULES] = config.stash.get(_DESELECTED_MODULES, set()) | {_module(i) for i in items}


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    run = current(item.config)
    if run is None or not _in_evidence(report, run):
        return report
    entry = run.evidence.test(report.nodeid)
    entry["duration_s"] = round(entry["duration_s"] + report.duration, 3)
    outcome = _outcome(report)
    if outcome is not None and (report.when == "call" or outcome != "passed"):
        entry["outcome"] = outcome
        if outcome != "passed":
            entry["message"] = _message(report)
            entry["longrepr"] = str(report.longrepr)[-4000:] if report.longrepr else None
    run.evidence.write()
    return report


def _in_evidence(report: pytest.TestReport, run: ClusterRun) -> bool:
    return report.nodeid in {t["nodeid"] for t in run.evidence.data["tests"]} or "cluster" in report.keywords


def _outcome(report: pytest.TestReport) -> str | None:
    if hasattr(report, "wasxfail"):
        return "xfailed" if report.skipped else "xpassed"
    if report.failed:
        return "failed" if report.when == "call" else "error"
    if report.skipped:
        return "skipped"
    return "passed" if report.when == "call" else None


def _message(report: pytest.TestReport) -> str:
    if report.skipped and isinstance(report.longrepr, tuple):
        return str(report.longrepr[2]).removeprefix("Skipped: ")
    if hasattr(report, "wasxfail"):
        return str(report.wasxfail)
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr or "")
    return text.removeprefix("Failed: ")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    run = current(session.config)
    if run is None:
        return
    stopped = (pytest.ExitCode.INTERRUPTED, pytest.ExitCode.INTERNAL_ERROR, pytest.ExitCode.USAGE_ERROR)
    interrupted = exitstatus in stopped
    unchecked = run.unchecked()
    data = run.evidence.data
    data["unchecked_thresholds"] = unchecked
    selected: set[str] = session.config.stash.get(_SELECTED_MODULES, set())
    deselected: set[str] = session.config.stash.get(_DESELECTED_MODULES, set())
    whole = selected - deselected
    enforced = [m for m in unchecked if module_of(m) in whole]
    gate_off = bool(enforced) and not interrupted
    if gate_off:
        data["errors"].append(f"thresholds that no test checked: {', '.join(enforced)}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    data["partial"] = bool(unchecked) and not gate_off
    nothing_ran = not session.items
    if nothing_ran:
        data["errors"].append("no test was selected: nothing was measured")
    failed = any(t["outcome"] in ("failed", "error") for t in data["tests"]) or gate_off or nothing_ran
    failed = failed or any(c["verdict"] == "fail" for c in run.evidence.checks())
    run.evidence.finish(complete=not interrupted, verdict="FAIL" if failed or interrupted else "PASS")
    plan.share_verdict(run)
    if run.evidence.data["verdict"] != "PASS" and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    run.evidence.write()
    write_atomic(run.evidence_dir / f"junit-{socket.gethostname()}.xml", junit_xml(data))


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    run = current(config)
    if run is None:
        return
    tr, data = terminalreporter, run.evidence.data
    rows = [
        (c["metric"], fmt(c["value"]), c["unit"], c["bound"] or "-", c["verdict"].upper())
        for c in run.evidence.checks()
    ]
    tr.section(f"cluster acceptance: profile {run.profile.name}")
    if rows:
        widths = [
            max(len(str(r[i])) for r in [("metric", "value", "unit", "bound", "verdict"), *rows]) for i in range(5)
        ]
        for row in [("metric", "value", "unit", "bound", "verdict"), *rows]:
            tr.write_line(
                "  ".join(
                    str(cell).rjust(w) if i == 1 else str(cell).ljust(w)
                    for i, (cell, w) in enumerate(zip(row, widths, strict=True))
                ).rstrip()
            )
    if data["unchecked_thresholds"]:
        gate_off = any(e.startswith("thresholds that no test checked") for e in data["errors"])
        kind = "ERROR" if gate_off else "not enforced: their tests were not selected, or the run was interrupted"
        tr.write_line(f"thresholds no test checked [{kind}]: {', '.join(data['unchecked_thresholds'])}", red=gate_off)
    tr.write_line(
        f"verdict: {data['verdict']}{'' if data['complete'] else ' (incomplete)'}; evidence: {run.evidence.path}",
        green=data["verdict"] == "PASS",
        red=data["verdict"] != "PASS",
    )
