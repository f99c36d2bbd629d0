"""The pytest side: options, profile loading, fixtures, the header, the verdict table and the evidence.

Without ``--cluster-profile`` (or ``CLUSTER_PROFILE``) the plugin is inert: other projects' tests run
as before, and tests that ask for the ``cluster`` fixture skip with a reason that says how to pick one.
"""

from __future__ import annotations

import datetime
import os
import socket
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

import pytest

from acceptance import profile as profiles
from acceptance.evidence import junit_xml, write_atomic
from acceptance.launch import ProbeError
from acceptance.schema import Threshold
from acceptance.session import ClusterRun, fmt
from acceptance.topology import TopologyError, resolve

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
        )
    except (profiles.ProfileError, TopologyError) as exc:
        raise pytest.UsageError(str(exc)) from None
    folder = config.getoption("cluster_evidence") or _default_folder(profile.name, placement.node_rank)
    config.stash[RUN_KEY] = ClusterRun(
        profile,
        placement,
        Path(folder),
        config.getoption("cluster_timeout"),
        run_tag=os.environ.get("CLUSTER_RUN_ID", ""),
    )


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
        f"cluster profile: {p.name} ({p.path}) sha256 {p.sha256[:16]}",
        f"cluster topology: {place.nodes} node(s) x {topo.nproc_per_node} rank(s), {topo.device}/{topo.backend}, "
        f"node rank {place.node_rank}, head {place.endpoint} (from {place.source})",
        f"cluster evidence: {run.evidence_dir}",
    ]


@pytest.fixture(scope="session")
def cluster(request: pytest.FixtureRequest) -> ClusterRun:
    run = current(request.config)
    if run is None:
        pytest.skip(NO_PROFILE)
    return run


def probe_result(
    run: ClusterRun, name: str, spec: dict[str, Any] | None = None, key: str | None = None, **world: int | None
) -> dict[str, Any]:
    """A probe's result for a fixture, its failure as the test's error (with the failing rank's log tail).
    ``world``: ``ranks_per_node`` / ``nodes`` for a run on a smaller world (see ``ClusterRun.probe``)."""
    try:
        return run.probe(name, spec, key, **world)
    except ProbeError as exc:
        pytest.fail(str(exc), pytrace=False)


def require_ranks(run: ClusterRun, at_least: int, what: str) -> None:
    if run.world_size < at_least:
        pytest.skip(
            f"{what} needs at least {at_least} ranks; profile {run.profile.name} has {run.world_size} "
            f"({run.placement.nodes} node(s) x {run.topology.nproc_per_node})"
        )


class Checker:
    """``check(metric, value, unit)``: bound the figure by the profile, record it, fail with one line."""

    def __init__(self, run: ClusterRun, item: pytest.Item, record: Callable[[str, object], None]) -> None:
        self.run, self.item, self.record_property = run, item, record

    def __call__(
        self, metric: str, value: float, unit: str, detail: str = "", default: Threshold | None = None
    ) -> None:
        self.all([(metric, value, unit, detail)], default=default)

    def all(self, figures: list[tuple[str, float, str, str]], default: Threshold | None = None) -> None:
        """Check several figures; fail once, listing every figure out of bounds."""
        failures, xfails = [], []
        for metric, value, unit, detail in figures:
            result = self.run.check(self.item.nodeid, metric, value, unit, detail, default)
            self.record_property(metric, value)
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
def check(
    cluster: ClusterRun, request: pytest.FixtureRequest, record_property: Callable[[str, object], None]
) -> Checker:
    return Checker(cluster, request.node, record_property)


_DESELECTED = pytest.StashKey[int]()
MUST_BE_ZERO = Threshold(eq=0, source="built-in: correctness is never mere information")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.cluster)


def pytest_deselected(items: list[pytest.Item]) -> None:
    if items:
        config = items[0].config
        config.stash[_DESELECTED] = config.stash.get(_DESELECTED, 0) + len(items)


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
    interrupted = exitstatus in (pytest.ExitCode.INTERRUPTED, pytest.ExitCode.INTERNAL_ERROR)
    unchecked = run.unchecked()
    deselected = session.config.stash.get(_DESELECTED, 0)
    data = run.evidence.data
    data["unchecked_thresholds"] = unchecked
    gate_off = bool(unchecked) and not deselected and not interrupted and session.testscollected > 0
    if gate_off:
        data["errors"].append(f"thresholds that no test checked: {', '.join(unchecked)}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    failed = any(t["outcome"] in ("failed", "error") for t in data["tests"]) or gate_off
    failed = failed or any(c["verdict"] == "fail" for c in run.evidence.checks())
    run.evidence.finish(complete=not interrupted, verdict="FAIL" if failed or interrupted else "PASS")
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
        kind = "ERROR" if data["errors"] else "not checked (tests deselected or interrupted)"
        tr.write_line(
            f"thresholds no test checked [{kind}]: {', '.join(data['unchecked_thresholds'])}", red=bool(data["errors"])
        )
    tr.write_line(
        f"verdict: {data['verdict']}{'' if data['complete'] else ' (incomplete)'}; evidence: {run.evidence.path}",
        green=data["verdict"] == "PASS",
        red=data["verdict"] != "PASS",
    )
