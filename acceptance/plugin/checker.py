"""What a test in ``tests_cluster/`` calls: the run, a probe's result, and ``check(metric, value, unit)``."""

from __future__ import annotations

from typing import Any

import pytest

from acceptance.evidence.junit import figure_properties
from acceptance.evidence.model import Check
from acceptance.plugin import options
from acceptance.profile.model import Threshold
from acceptance.run.cluster_run import ClusterRun
from acceptance.run.judging import against_baseline
from acceptance.run.launcher import ProbeError

SESSION_NAME = "cluster-acceptance-session"
NO_PROFILE = (
    "no cluster profile selected: pass --cluster-profile NAME (or set CLUSTER_PROFILE); "
    "`cluster-acceptance list` shows the profiles, local-cpu runs on any machine"
)


def baseline_of(config: pytest.Config) -> dict[str, dict[str, Any]] | None:
    """--cluster-baseline: the earlier run's figures by metric, or None."""
    session = config.pluginmanager.get_plugin(SESSION_NAME)
    return None if session is None else session.baseline  # type: ignore[no-any-return]


def current(config: pytest.Config) -> ClusterRun | None:
    """The run of this pytest session, or None when the plugin is inert (no profile)."""
    session = config.pluginmanager.get_plugin(SESSION_NAME)
    return None if session is None else session.run  # type: ignore[no-any-return]


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
        # shown once (no chained copy), yet the cause stays reachable as __context__: the report of every
        # later test that hits it shrinks to one line (ClusterSession.pytest_runtest_makereport)
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
            judged = self.run.check(self.item.nodeid, metric, value, unit, detail, default)
            # the same properties the plugin's own JUnit carries (what record_property does, without its
            # warning under the default junit_family xunit2)
            c = judged.check
            failures += self._against_baseline(c) if c.verdict == "pass" else []
            self.item.user_properties += figure_properties(metric, c.value, unit, c.bound, c.verdict)
            if judged.verdict == "fail":
                failures.append(judged.message)
            elif judged.verdict == "xfail":
                xfails.append(f"{judged.message} [known issue: {judged.xfail_reason}]")
        self.run.evidence.write(soon=True)
        if failures:
            pytest.fail("\n".join(failures), pytrace=False)
        if xfails:
            pytest.xfail("\n".join(xfails))

    def _against_baseline(self, check: Check) -> list[str]:
        """--cluster-baseline: the figure just checked against the earlier run's, by the rule of ``compare``;
        a figure worse beyond the tolerance fails even where the profile's bound held."""
        profile = self.run.profile
        judged = against_baseline(profile, baseline_of(self.item.config), check.metric, check.value, bool(check.bound))
        if judged is None:
            return []
        tolerance = judged.change.tolerance
        check.baseline = {"value": judged.change.old, "bound": judged.change.limit, "tolerance": tolerance}
        if judged.ok:
            return []
        check.verdict, check.bound = "baseline_fail", f"{check.bound} and {judged.change.limit}"
        message = f"{judged.message} [--cluster-baseline {options.value(self.item.config, 'cluster_baseline')}]"
        return [message + (f"\n{check.detail}" if check.detail else "")]  # the slowest GPU, as a bound's failure

    def measurements(self, key: str, data: Any) -> None:
        """Attach a table (a sweep, a per-GPU list) to this test's evidence."""
        self.run.evidence.test(self.item.nodeid).measurements[key] = data
