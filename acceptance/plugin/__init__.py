"""The pytest side: options, markers, fixtures; the run's state lives in one plugin object.

The run's settings are resolved once here (``acceptance.plugin.settings``). Without ``--cluster-profile``
(or ``CLUSTER_PROFILE``, or the ini key ``cluster_profile``) the plugin is inert: other projects' tests run
as before, and tests that ask for the ``cluster`` fixture skip with a reason that says how to pick one; a
selection of the acceptance suite itself is a usage error (``acceptance.plugin.no_profile``).
With a profile, ``pytest_configure`` registers a :class:`~acceptance.plugin.session.ClusterSession` with
the plugin manager (the way pytest-xdist registers its DSession): it holds the run and implements the
session's hooks, and its ``pytest_unconfigure`` restores what it changed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from acceptance.plugin import options
from acceptance.plugin.checker import NO_PROFILE, SESSION_NAME, Checker, current
from acceptance.plugin.no_profile import refuse_the_suite
from acceptance.plugin.opt_in import deselect_unasked
from acceptance.plugin.session import ClusterSession
from acceptance.plugin.settings import RunSettings
from acceptance.plugin.training_stage import TrainingStage
from acceptance.profile.registry import FAMILIES, family_of_module
from acceptance.run.cluster_run import ClusterRun


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add_to_pytest(parser)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "cluster: an acceptance test that runs probes on the cluster")
    config.addinivalue_line("markers", "cluster_preflight: fails with the preflight's line when the node lacks GPUs")
    for family in FAMILIES:
        config.addinivalue_line("markers", f"{family.marker}: the {family.name} family: {family.doc}")
    # every setting read here, once: the session and what it drives take theirs from the settings
    settings = RunSettings.read(config)
    if settings is not None:
        session = ClusterSession.start(config, settings)
        config.pluginmanager.register(session, SESSION_NAME)
        config.pluginmanager.register(TrainingStage(session), f"{SESSION_NAME}-training-stage")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # with a profile, the families in the registry's order: cheap and diagnostic first, so that a missing rank
    # or a sick GPU is named before a long sweep starts; a stable sort keeps each module's own order. Without
    # one the plugin is inert: another project's test_health.py keeps its place
    if current(config) is not None:
        order = [f.module for f in FAMILIES]
        items.sort(key=lambda item: order.index(item.path.stem) if item.path.stem in order else len(order))
    # markers before -m deselects (this hook runs before the one that applies -m)
    for item in items:
        if "cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.cluster)
            family = family_of_module(Path(item.nodeid.split("::")[0]).stem)
            if family is not None:
                item.add_marker(getattr(pytest.mark, family.marker))
    # an opt-in family (a soak of minutes) runs only when the run names it: -m soak, its module, or its tier
    session: ClusterSession | None = config.pluginmanager.get_plugin(SESSION_NAME)
    if session is not None:
        deselect_unasked(config, items, session.settings.tier.value)
    else:  # the acceptance suite without a profile would skip every test and exit 0
        refuse_the_suite(config, items)


@pytest.fixture(scope="session")
def cluster(request: pytest.FixtureRequest) -> ClusterRun:
    run = current(request.config)
    if run is None:
        pytest.skip(NO_PROFILE)
    return run


@pytest.fixture
def check(cluster: ClusterRun, request: pytest.FixtureRequest) -> Checker:
    return Checker(cluster, request.node)
