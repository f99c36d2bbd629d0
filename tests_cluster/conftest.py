"""Parametrizes the acceptance tests from the profile, so each figure is its own JUnit case."""

from __future__ import annotations

import pytest

from acceptance.plugin import NO_PROFILE, current
from acceptance.profile.metrics import FAMILY_MODULES


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "coll_case" in metafunc.fixturenames:
        run = current(metafunc.config)
        if run is None:
            metafunc.parametrize("coll_case", [pytest.param(None, marks=pytest.mark.skip(reason=NO_PROFILE))])
            return
        cfg = run.profile.model.collectives
        cases = [(op, size) for op in cfg.ops for size in cfg.sizes]
        metafunc.parametrize("coll_case", cases, ids=[f"{op}-{size}" for op, size in cases])
    for name in ("train_strategy", "canary_strategy"):
        if name in metafunc.fixturenames:
            run = current(metafunc.config)
            if run is None:
                metafunc.parametrize(name, [pytest.param(None, marks=pytest.mark.skip(reason=NO_PROFILE))])
                continue
            strategies = run.profile.model.training.strategies
            # the canary compares every strategy with the first one
            chosen = strategies if name == "train_strategy" else strategies[1:]
            metafunc.parametrize(name, chosen, ids=chosen)


# Cheap and diagnostic first: a missing rank or a sick GPU should be named before a long sweep starts. The
# probes timed on the GPU come right before training, whose job starts in their shadow (training_stage).
MODULE_ORDER = tuple(FAMILY_MODULES.values())


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        name = item.path.stem
        return MODULE_ORDER.index(name) if name in MODULE_ORDER else len(MODULE_ORDER)

    items.sort(key=rank)
