"""The pytest side: options, markers, fixtures; the run's state lives in one plugin object.

Without ``--cluster-profile`` (or ``CLUSTER_PROFILE``, or the ini key ``cluster_profile``) the plugin is
inert: other projects' tests run as before, and tests that ask for the ``cluster`` fixture skip with a
reason that says how to pick one. With a profile, ``pytest_configure`` registers a
:class:`~acceptance.plugin.session.ClusterSession` with the plugin manager (the way pytest-xdist
registers its DSession): it holds the run and implements the session's hooks, and its
``pytest_unconfigure`` restores what it changed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from acceptance.plugin import options
from acceptance.plugin.checker import (
    NO_PROFILE as NO_PROFILE,
)
from acceptance.plugin.checker import (
    SESSION_NAME,
    Checker,
    current,
)
from acceptance.plugin.checker import (
    baseline_of as baseline_of,
)
from acceptance.plugin.checker import (
    probe_result as probe_result,
)
from acceptance.plugin.checker import (
    probe_wall_s as probe_wall_s,
)
from acceptance.plugin.checker import (
    require_ranks as require_ranks,
)
from acceptance.plugin.session import ClusterSession
from acceptance.plugin.training_stage import TrainingStage
from acceptance.profile.metrics import FAMILY_DOCS, family_of_module
from acceptance.run.cluster_run import ClusterRun
from acceptance.run.judging import MUST_BE_ZERO as MUST_BE_ZERO  # re-exported for test modules

__all__ = ["MUST_BE_ZERO", "NO_PROFILE", "Checker", "current", "probe_result", "probe_wall_s", "require_ranks"]


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add_to_pytest(parser)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "cluster: an acceptance test that runs probes on the cluster")
    config.addinivalue_line("markers", "cluster_preflight: fails with the preflight's line when the node lacks GPUs")
    for family, doc in FAMILY_DOCS.items():
        config.addinivalue_line("markers", f"{family}: the {family} family: {doc}")
    name = options.value(config, "cluster_profile")
    if name:
        session = ClusterSession.start(config, str(name))
        config.pluginmanager.register(session, SESSION_NAME)
        config.pluginmanager.register(TrainingStage(session), f"{SESSION_NAME}-training-stage")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # markers before -m deselects (this hook runs before the one that applies -m)
    for item in items:
        if "cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.cluster)
            family = family_of_module(Path(item.nodeid.split("::")[0]).stem)
            if family is not None:
                item.add_marker(getattr(pytest.mark, family))


@pytest.fixture(scope="session")
def cluster(request: pytest.FixtureRequest) -> ClusterRun:
    run = current(request.config)
    if run is None:
        pytest.skip(NO_PROFILE)
    return run


@pytest.fixture
def check(cluster: ClusterRun, request: pytest.FixtureRequest) -> Checker:
    return Checker(cluster, request.node)
