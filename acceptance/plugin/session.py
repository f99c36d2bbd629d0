"""The plugin object: one acceptance run inside one pytest session, and the hooks that drive it."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
import time
from collections.abc import Generator
from dataclasses import replace
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from _pytest.junitxml import xml_key  # pytest's --junitxml writer: the verdict is a property of its suite

from acceptance.atomic_file import host_part, write_atomic
from acceptance.evidence.drain import DrainList, cause_of
from acceptance.evidence.folder import EvidenceFolderError, default_folder
from acceptance.evidence.junit import junit_xml, verdict_case
from acceptance.evidence.store import EvidenceError, EvidenceWriteError, read_evidence
from acceptance.evidence.verdict import facts_of
from acceptance.json_types import JSONObject
from acceptance.multinode import meeting as meetings
from acceptance.multinode.plan import Plan, failed_preflight_categories, shared_host_names, versions
from acceptance.plugin.drain_hooks import act_on, categorize
from acceptance.plugin.outcomes import (
    RECORDED,
    is_recorded,
    mark_recorded,
    only_information,
    outcome_of,
    report_unrun,
    report_verdict,
)
from acceptance.plugin.preflight_hooks import (
    PREFIX,
    fail_the_gate,
    fail_with_other_nodes,
    run_preflight,
    shorten_repeated_probe_error,
    skip_without_gpus,
)
from acceptance.plugin.settings import RunSettings
from acceptance.plugin.summary import UNCHECKED, header_lines, summary_lines
from acceptance.plugin.tiers import Selection
from acceptance.profile import baseline
from acceptance.profile import loader as profiles
from acceptance.profile.metrics import device_problem, module_of
from acceptance.profile.registry import family_of_module
from acceptance.run.cluster_run import ClusterRun
from acceptance.run.placement import Placement, TopologyError, resolve
from acceptance.run.preflight import PreflightResult
from acceptance.verdicts import FAILED_OUTCOMES, Facts, decide, problems

# the run did not go to its end: Ctrl-C or SIGTERM, a crash of pytest, a node that disagreed or went missing
STOPPED = (pytest.ExitCode.INTERRUPTED, pytest.ExitCode.INTERNAL_ERROR, pytest.ExitCode.USAGE_ERROR)


def _interrupt_on_term(signum: int, frame: FrameType | None) -> None:
    # SIGTERM (a CI job cancelled, a pod evicted) unwinds like Ctrl-C: probes killed, evidence marked incomplete
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


def _module(nodeid: str) -> str:
    return Path(nodeid.split("::")[0]).stem


def _in_tier(selection: Selection, nodeid: str) -> bool:
    family = family_of_module(_module(nodeid))
    return family is None or selection.runs(family)


class ClusterSession:
    """The run's state and hooks; registered with the plugin manager by ``pytest_configure``."""

    def __init__(self, config: pytest.Config, run: ClusterRun, settings: RunSettings) -> None:
        self.config, self.run, self.settings = config, run, settings  # config: its hooks and reporters only
        self.collect_only = settings.modes.collect_only
        self.selected: list[str] = []
        self.deselected: set[str] = set()
        # every test collection found, before --lf or a node id narrowed a module down (neither deselects)
        self.collected: set[str] = set()
        self.unexpanded: set[str] = set()  # collectors (classes) whose tests a node id left uncollected
        self.finished: set[str] = set()
        self.running: str | None = None
        self.previous_term: Any = None
        self.preflight: PreflightResult | None = None
        self.started = time.monotonic()
        tier = settings.tier.value
        self.tier = Selection(tier, run.profile.model.tiers.get(tier.name, {}), origin=str(settings.tier.origin))
        self.drain: DrainList | None = None
        self.drain_way = settings.drain.value
        run.evidence.strict = False  # a full disk stops the run with one line (``pytest_runtest_logfinish``)
        if not self.collect_only and threading.current_thread() is threading.main_thread():
            self.previous_term = signal.signal(signal.SIGTERM, _interrupt_on_term)
        run.progress = self.say

    def say(self, line: str) -> None:
        """A progress line on the terminal while a test runs: past pytest's output capture, as live logging
        writes (``CaptureManager.global_and_fixture_disabled``); nothing with the terminal reporter off."""
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None:
            return
        capture = self.config.pluginmanager.get_plugin("capturemanager")
        with capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext():
            reporter.write_line(f"[cluster] {line}")

    @classmethod
    def start(cls, config: pytest.Config, settings: RunSettings) -> ClusterSession:
        """Find where this node stands, read the baseline, claim the evidence folder: a usage error (exit 4)
        for anything wrong, before any probe is launched (the settings and the profile are already read)."""
        profile = settings.profile
        _refuse_unmeasurable(profile)
        folder: Path | str = "(not chosen yet)"
        try:
            # the placement first, before the evidence folder exists: a bad one leaves nothing behind
            placement = _placement(settings)
            old_path = settings.baseline.value
            old = baseline.figures(read_evidence(old_path)) if old_path else None
            folder = _folder(settings.evidence.value, profile.name, placement.nodes, placement.node_rank, profile)
            label = f"--cluster-baseline {old_path}"
            run = ClusterRun(
                profile,
                placement,
                folder,
                timeout_override=settings.timeout.value,
                run_tag=settings.run_tag.value,
                persist=not settings.modes.collect_only,
                worker=settings.worker.value,
                baseline=old,
                baseline_label=label,
            )
        except (TopologyError, EvidenceFolderError) as exc:
            raise pytest.UsageError(str(exc)) from None
        except EvidenceWriteError as exc:
            raise pytest.UsageError(str(exc)) from None
        except EvidenceError as exc:
            raise pytest.UsageError(f"--cluster-baseline: {exc}") from None
        except OSError as exc:  # the evidence folder's disk: full, read-only, gone
            raise pytest.UsageError(f"evidence folder {folder}: cannot write: {exc.strerror or exc}") from None
        return cls(config, run, settings)

    @property
    def meets(self) -> bool:
        """One pytest per node: the nodes must agree on the plan (the srun controller is a single pytest)."""
        return self.run.placement.nodes > 1 and self.run.topology.launcher == "torchrun"

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        return [*header_lines(self.run, self.meets), self.settings.line()]

    @pytest.hookimpl(trylast=True)  # on the tests left after -k and -m
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        self.tier.apply(config, items)
        self.run.evidence.doc.tier = self.tier.record(self.run.topology.device)
        if not self.collect_only:
            self.preflight = run_preflight(self.run, items, self.settings.modes.probes)
        skip_without_gpus(self.preflight, items)

    def pytest_report_collectionfinish(self, config: pytest.Config) -> str:
        return self.tier.line()

    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        fail_the_gate(self.preflight, item, self.run)

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        self.deselected |= {item.nodeid for item in items}

    @pytest.hookimpl(wrapper=True, trylast=True)  # innermost: sees a file's tests before --lf filters them
    def pytest_make_collect_report(self, collector: pytest.Collector) -> Generator[None, Any, Any]:
        report = yield
        for node in report.result or ():
            if isinstance(node, pytest.Item):
                self.collected.add(node.nodeid)
            elif not isinstance(node, (pytest.File, pytest.Dir, pytest.Package)):
                self.unexpanded.add(node.nodeid)
        self.unexpanded.discard(collector.nodeid)
        return report

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.selected = [item.nodeid for item in session.items]
        if self.collect_only:
            return
        self.run.evidence.doc.selected = list(self.selected)
        if not any("cluster" in item.keywords for item in session.items):
            self.collect_only = True  # from here on, like --collect-only: nothing is measured or written
            self.run.discard()
            raise pytest.UsageError(
                f"no cluster test was selected, so nothing would be measured (profile {self.run.profile.name}): "
                "run the suite, e.g. pytest --cluster-profile NAME tests_cluster/"
            )
        if self.meets:
            self._meet(session.items)

    def _meet(self, items: list[pytest.Item]) -> None:
        run, place = self.run, self.run.placement
        plan = Plan(
            node_rank=place.node_rank,
            host=socket.gethostname(),
            rendezvous_name=socket.getfqdn(),
            nodes=place.nodes,
            head=place.endpoint,
            profile_sha256=run.profile.sha256,
            profile=run.profile.resolved,
            tests=self.selected,
            versions=versions(),
            preflight="" if self.preflight is None or self.preflight.ok else self.preflight.message,
            preflight_category="" if self.preflight is None or self.preflight.ok else self.preflight.category,
        )
        try:
            agreement = meetings.meet(place, run.profile.model.timeouts.rendezvous, plan)
        except meetings.PlanError as exc:
            run.evidence.error(str(exc))
            run.evidence.write()
            raise pytest.UsageError(str(exc)) from None
        run.join(agreement.meeting, agreement.session, agreement.record)
        if shared := shared_host_names(agreement.plans):
            self.say(shared)
        others = failed_preflight_categories(agreement.plans, place.node_rank)
        self.preflight = fail_with_other_nodes(self.preflight, others, run, items)

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        self.running = nodeid

    def pytest_runtest_logfinish(self, nodeid: str) -> None:
        """A full evidence disk stops the run after the test it happened in: what is measured from here on
        could not be kept. Exit 3 (internal error) with the one line; the session's end marks it INCOMPLETE."""
        if self.run.evidence.unwritable is not None:
            pytest.exit(self.run.evidence.unwritable, returncode=pytest.ExitCode.INTERNAL_ERROR)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "teardown":
            self.finished.add(report.nodeid)
            self.running = None

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        shorten_repeated_probe_error(item, call, report, self.run)
        recorded = self.run.evidence.has_test(report.nodeid) or "cluster" in report.keywords
        if recorded:
            categorize(call, report, self.run)
        if recorded and report.when == "call" and report.passed:
            checks = self.run.evidence.test(report.nodeid).checks
            if only_information(checks):
                mark_recorded(item, report, checks)
        if recorded:
            self._record(report)
            case = self.run.evidence.test(report.nodeid)
            if report.failed and case.outcome in FAILED_OUTCOMES and "category" not in dict(item.user_properties):
                # whose fault, and what to do, in pytest's --junitxml (which takes the item's properties with
                # its teardown report) as in the plugin's own JUnit
                item.user_properties += list(zip(("category", "action"), cause_of(case), strict=True))
        return report

    def pytest_report_teststatus(self, report: pytest.TestReport) -> tuple[str, str, str] | None:
        """A test that recorded information only is counted as such: ``12 recorded``, ``r``, RECORDED."""
        if report.when == "call" and is_recorded(report):
            return RECORDED, "r", RECORDED.upper()
        return None

    def _record(self, report: pytest.TestReport) -> None:
        case = self.run.evidence.test(report.nodeid)
        if case.local is None:  # once a test: its family's, for the drain list's test-level failures
            family = family_of_module(_module(report.nodeid))
            case.local = family.local if family is not None else None
        case.duration_s = round(case.duration_s + report.duration, 3)
        outcome, message = outcome_of(report)
        if outcome is not None and (report.when == "call" or outcome != "passed"):
            case.outcome = outcome
            if outcome != "passed":
                case.message = message
            if outcome not in ("passed", RECORDED):
                case.longrepr = str(report.longrepr)[-4000:] if report.longrepr else None
        # burn-in: every test's outcome is on disk at once (a checkpoint), so a burn-in stopped after hours
        # keeps all it measured; the other tiers write at most every WRITE_EVERY_S
        self.run.evidence.write(soon=self.tier.tier.name != "burn-in")

    @pytest.hookimpl(tryfirst=True)  # before junitxml writes its file: the unrun tests must be in it
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.collect_only:
            return
        interrupted = exitstatus in STOPPED
        if interrupted:
            report_unrun(session, self.run.evidence, self.finished, self.running)
        facts = self._facts(interrupted)
        if self.run.evidence.doc.tier is not None:
            self.run.evidence.doc.tier.wall_s = round(time.monotonic() - self.started, 1)
        verdict = decide(facts)
        for problem in problems(facts):
            self.run.evidence.error(problem)
        verdict = self._share(verdict, facts)
        self.run.evidence.finish(verdict, complete=not interrupted, partial=facts.subset)
        if verdict == "FAIL" and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        evidence = self.run.evidence
        evidence.write()
        if evidence.unwritable is not None:
            # the file on disk is the last whole one, marked incomplete; the terminal and JUnit say so too
            evidence.error(evidence.unwritable)
            verdict = decide(replace(facts, unrecorded=True))
            evidence.finish(verdict, complete=False, partial=facts.subset)
            session.exitstatus = pytest.ExitCode.INTERNAL_ERROR
        # what CI reads: a FAIL or an INCOMPLETE no test shows is one more case in pytest's report too
        report_verdict(session, verdict_case(evidence.doc, verdict))
        xml = session.config.stash.get(xml_key, None)
        if xml is not None:
            xml.add_global_property("verdict", verdict)
        try:
            write_atomic(self.run.evidence_dir / f"junit-{host_part()}.xml", junit_xml(evidence.doc))
        except OSError as exc:
            evidence.error(f"JUnit {self.run.evidence_dir}: cannot write: {exc.strerror or exc}")
            session.exitstatus = pytest.ExitCode.INTERNAL_ERROR
        self.drain = act_on(evidence.doc, self.run.evidence_dir, evidence.path, self.drain_way)
        if self.drain is not None and self.drain["interrupted"]:
            # a signal while the scheduler's commands ran: the verdict stands, the status is an interrupted
            # run's (docs/running.md, "The verdict"); drain.json says which command it stopped
            session.exitstatus = pytest.ExitCode.INTERRUPTED

    def _facts(self, interrupted: bool) -> Facts:
        """What the run knows; thresholds are enforced for the families whose module ran whole: every test
        collection found in it selected (-k, -m, --deselect, --lf and a node id all select part of one)."""
        run = self.run
        ran_modules = {_module(n) for n in self.selected}
        left_out = (self.collected - set(self.selected)) | self.deselected | self.unexpanded
        # the tests of families outside the run's tier are no part of it (deselected by the tier, or an
        # opt-in family the run did not ask for): their absence makes no run partial
        left_out = {n for n in left_out if _in_tier(self.tier, n)}
        partly = {_module(n) for n in left_out}
        whole = ran_modules - partly
        # a threshold of a family outside the tier is the profile's for another moment, not a gate left off
        unchecked = [m for m in run.unchecked() if _in_tier(self.tier, f"{module_of(m)}.py")]
        run.evidence.doc.unchecked_thresholds = unchecked
        enforced = [m for m in unchecked if module_of(m) in whole]
        # a failed preflight skipped the checks: its line is the cause, the unchecked thresholds are not news
        preflight_failed = any(e.startswith(PREFIX) for e in run.evidence.doc.errors)
        if enforced and not interrupted and not preflight_failed:
            run.evidence.error(f"{UNCHECKED}{', '.join(enforced)}")
        subset = bool(left_out) or not self.tier.tier.modules <= ran_modules
        return facts_of(run.evidence.doc, interrupted=interrupted, subset=subset)

    def _share(self, verdict: str, facts: Facts) -> Any:
        """Node 0 of several hears every node's verdict and answers for the cluster."""
        meeting, evidence = self.run.meeting, self.run.evidence
        if meeting is None:
            return verdict
        mine: JSONObject = {
            "node_rank": meeting.rank,
            "host": evidence.doc.topology.host,
            "verdict": verdict,
            "complete": not facts.interrupted,
            "evidence": str(evidence.path.resolve()),
        }
        heard = meetings.exchange_verdicts(meeting, mine)
        for problem in heard.problems:
            evidence.error(problem)
        if meeting.rank == 0:
            evidence.cluster.node_verdicts = heard.nodes
        node_verdicts = [str(n["verdict"]) for n in heard.nodes]
        return decide(facts_of(evidence.doc, facts.interrupted, facts.subset, node_verdicts))

    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
        if self.collect_only:
            return
        terminalreporter.section(f"cluster acceptance: profile {self.run.profile.name}")
        for line, color in summary_lines(self.run.evidence.doc, str(self.run.evidence.path), self.drain):
            terminalreporter.write_line(line, **({color: True} if color else {}))

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self.previous_term is not None:
            signal.signal(signal.SIGTERM, self.previous_term)
        self.run.close()


def _refuse_unmeasurable(profile: profiles.Profile) -> None:
    """A bound the profile's device can never measure (a GPU-only figure on a CPU profile) is refused
    before anything runs: the run would measure everything else and then fail on it."""
    device = profile.model.topology.device
    found = [p for key in profile.model.thresholds if (p := device_problem(key, device)) is not None]
    if found:
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise pytest.UsageError(f"profile {profile.name} ({profile.path}): {found[0]}{more}")


def _placement(settings: RunSettings) -> Placement:
    profile = settings.profile
    topo = profile.model.topology
    placement = resolve(
        os.environ,
        topo.nodes,
        nodes=settings.nodes.value,
        node_rank=settings.node_rank.value,
        head=settings.head.value,
        default_port=topo.rdzv_port,
        launcher=topo.launcher,
        given_by=settings.placement_origin,
    )
    if placement.nodes != topo.nodes:
        # a 2x8 acceptance profile must never pass on one node because the allocation came out short
        raise TopologyError(
            f"profile {profile.name} expects {topo.nodes} node(s), but {placement.source} says "
            f"{placement.nodes}: fix the allocation, or pass --cluster-set topology.nodes={placement.nodes} "
            "to accept another size on purpose"
        )
    return placement


def _folder(given: Path | None, name: str, nodes: int, node_rank: int, profile: profiles.Profile) -> Path:
    if given is None:
        return default_folder(name, node_rank)
    if nodes > 1 and profile.model.topology.launcher == "torchrun":
        # one pytest per node may share the folder (a shared filesystem, one volume): one subfolder each
        return given / f"node{node_rank}-{host_part()}"
    return given
