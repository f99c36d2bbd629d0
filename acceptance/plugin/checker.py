"""What a test in ``tests_cluster/`` calls: the run, a probe's result, and ``check(metric, value, unit)``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NoReturn, TypeVar, overload

import pytest
from typing_extensions import Unpack

from acceptance.evidence.junit import figure_properties
from acceptance.run.cluster_run import ClusterRun, ProbeOptions
from acceptance.run.launcher import ProbeError
from acceptance.schema.bounds import Threshold
from acceptance.schema.figure import Figure
from acceptance.schema.results import ResultMismatch, validated

T = TypeVar("T")
SESSION_NAME = "cluster-acceptance-session"
NO_PROFILE = (
    "no cluster profile selected: pass --cluster-profile NAME (or set CLUSTER_PROFILE); "
    "`cluster-acceptance list` shows the profiles, local-cpu runs on any machine"
)


def current(config: pytest.Config) -> ClusterRun | None:
    """The run of this pytest session, or None when the plugin is inert (no profile)."""
    session = config.pluginmanager.get_plugin(SESSION_NAME)
    return None if session is None else session.run  # type: ignore[no-any-return]


def probe_result(
    run: ClusterRun,
    name: str,
    shape: type[T],
    spec: Mapping[str, object] | None = None,
    **options: Unpack[ProbeOptions],
) -> T:
    """A probe's result for a fixture, validated as its family's type (``shape``: the TypedDict its probe
    writes), so that the family's rules read what the type says; its failure as the test's error (with the
    failing rank's log tail), and so is a result that does not match its type (each field named). ``spec``
    and ``options``: as in ``ClusterRun.probe``."""
    try:
        found = run.probe(name, spec, **options)
    except ProbeError as exc:
        # shown once (no chained copy), yet the cause stays reachable as __context__: the report of every
        # later test that hits it shrinks to one line (ClusterSession.pytest_runtest_makereport)
        raise pytest.fail.Exception(str(exc), pytrace=False) from None
    try:
        return validated(name, shape, found)
    except ResultMismatch as exc:
        raise pytest.fail.Exception(str(exc), pytrace=False) from None


def probe_wall_s(run: ClusterRun, key: str) -> float:
    """A probe's wall time as the launcher measured it: in a job of its own torch import and rendezvous
    included; in the worker from the request to the result, the worker's start included for its first probe."""
    runs = [p for p in run.evidence.doc.probes if p.key == key and p.wall_s is not None]
    if not runs:
        pytest.fail(f"no finished {key} probe in this session's evidence", pytrace=False)
    return float(runs[-1].wall_s or 0.0)


def require_ranks(run: ClusterRun, at_least: int, what: str) -> None:
    if run.world_size < at_least:
        pytest.skip(
            f"{what} needs at least {at_least} ranks; profile {run.profile.name} has {run.world_size} "
            f"({run.placement.nodes} node(s) x {run.topology.nproc_per_node})"
        )


def _figure(found: Figure | tuple[str, float, str, str]) -> Figure:
    """The figure ``check`` was handed: a family's ``Figure``, or ``(metric, value, unit, detail)`` as one whose
    detail is its one finding."""
    if isinstance(found, Figure):
        return found
    metric, value, unit, detail = found
    return Figure(metric, unit, value, findings=[detail] if detail else [])


class Checker:
    """``check(figure)`` (a family's rules give the ``Figure``) or ``check(metric, value, unit)``: the run's
    judge gives the figure its verdict; it is recorded, and the test fails with one line per figure that
    failed (a known issue: xfail)."""

    def __init__(self, run: ClusterRun, item: pytest.Item) -> None:
        self.run, self.item = run, item

    @overload
    def __call__(self, metric: Figure) -> None: ...

    @overload
    def __call__(
        self,
        metric: str,
        value: float,
        unit: str,
        detail: str = "",
        default: Threshold | None = None,
        unmeasured: str | None = None,
    ) -> None: ...

    def __call__(
        self,
        metric: str | Figure,
        value: float = 0.0,
        unit: str = "",
        detail: str = "",
        default: Threshold | None = None,
        unmeasured: str | None = None,
    ) -> None:
        if isinstance(metric, Figure):
            self.figure(metric)
            return
        self.all([(metric, value, unit, detail)], default=default, unmeasured=unmeasured)

    def figure(self, fig: Figure) -> None:
        """A family's figure: skipped where it does not apply (``skip``, which says why), else checked with
        its detail, its bound from the run (a profile threshold of the same name wins) and what could not be
        measured (the judge fails it with that)."""
        if fig.skip:
            pytest.skip(fig.skip)
        self.all([fig], unmeasured=fig.unmeasured_text)

    def all(
        self,
        figures: Sequence[Figure | tuple[str, float, str, str]],
        default: Threshold | None = None,
        unmeasured: str | None = None,
    ) -> None:
        """Check several figures (a family's ``Figure``s, with their own bounds, or ``(metric, value, unit,
        detail)``); fail once, listing every figure that failed. ``unmeasured``: the units that could not
        measure the figures (taken over the others), in words; the judge fails each figure with it
        (``Judge.judge``)."""
        failures, xfails = [], []
        for found in figures:
            judged = self.run.check(self.item.nodeid, _figure(found), default, unmeasured)
            # the same properties the plugin's own JUnit carries (what record_property does, without its
            # warning under the default junit_family xunit2)
            self.item.user_properties += figure_properties(
                judged.metric, judged.value, judged.unit, judged.bound, judged.verdict
            )
            if judged.failed:
                failures.append(judged.message)
            elif judged.verdict == "xfail":
                xfails.append(f"{judged.message} [known issue: {judged.xfail_reason}]")
        self.run.evidence.write(soon=True)
        if failures:
            pytest.fail("\n".join(failures), pytrace=False)
        if xfails:
            pytest.xfail("\n".join(xfails))

    def missing(self, metric: str, unit: str, why: str) -> NoReturn:
        """A figure the probe did not measure at all: recorded as unmeasured, so the judge fails it (never a
        pass, whatever its bound), and the test with it."""
        self(metric, 0.0, unit, unmeasured=why)
        raise AssertionError(f"{metric}: the judge passed a figure that was not measured")  # check failed above

    def measurements(self, key: str, data: Any) -> None:
        """Attach a table (a sweep, a per-GPU list) to this test's evidence."""
        self.run.evidence.test(self.item.nodeid).measurements[key] = data
