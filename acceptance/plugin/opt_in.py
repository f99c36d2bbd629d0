"""Families that run only when asked for (``Family.opt_in``): a soak of minutes is no part of the standard
suite's time budget, so a plain run leaves its tests out, the way pytest's ``-m`` leaves tests out.

A run asks for an opt-in family by naming it: in the ``-m`` expression (``-m soak``, ``-m "soak or drift"``),
by giving its test module on the command line (``tests_cluster/test_soak.py``), or by a tier that includes it
(``--cluster-tier burn-in``). ``-m cluster`` or ``-m "not compute"`` select the family's tests whether it is
named or not, so they do not ask for it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _pytest.mark import expression as mark_expression  # how pytest's own -m evaluates an expression

from acceptance.profile.registry import FAMILIES
from acceptance.profile.tiers import Tier
from acceptance.schema.family import Family

CLUSTER_MARK = "cluster"  # every test of the suite carries it (``pytest_collection_modifyitems``)
Expression = mark_expression.Expression
# a malformed expression: SyntaxError from pytest 9 on, ParseError before it
MALFORMED: tuple[type[Exception], ...] = (
    SyntaxError,
    pytest.UsageError,
    getattr(mark_expression, "ParseError", SyntaxError),
)


def _marked(expr: Expression, marks: frozenset[str]) -> bool:
    return expr.evaluate(lambda name, /, **kwargs: name in marks)


def named_by_markexpr(markexpr: str, family: Family[Any]) -> bool:
    """Whether the ``-m`` expression selects the family's tests because of the family's marker: true for a
    test that carries it, false for the same test without it."""
    if not markexpr.strip():
        return False
    try:
        expr = Expression.compile(markexpr)
    except MALFORMED:
        return False  # pytest's own -m reports the expression as a usage error
    with_it = frozenset({CLUSTER_MARK, family.marker})
    return _marked(expr, with_it) and not _marked(expr, with_it - {family.marker})


def named_by_argument(args: list[str], family: Family[Any]) -> bool:
    """Whether a command-line argument is the family's test module (or a test of it)."""
    return any(Path(arg.split("::")[0]).stem == family.module for arg in args)


def opt_in_selected(config: pytest.Config, family: Family[Any], tier: Tier) -> bool:
    """Whether this run asked for ``family``: by ``-m``, by its module, or by its ``tier`` (the run's
    settings: ``--cluster-tier``, else its profile's ``tier:``) including it. A family that is not
    ``opt_in`` always is."""
    if not family.opt_in:
        return True
    markexpr = str(getattr(config.option, "markexpr", "") or "")
    if named_by_markexpr(markexpr, family) or named_by_argument(list(config.args), family):
        return True
    return tier.has(family)


def left_out_modules(config: pytest.Config, tier: Tier) -> frozenset[str]:
    """The test modules of the opt-in families this run did not ask for: deselected, and no part of the
    suite whose absence makes a run partial."""
    return frozenset(f.module for f in FAMILIES if not opt_in_selected(config, f, tier))


def deselect_unasked(config: pytest.Config, items: list[pytest.Item], tier: Tier) -> None:
    """Deselect the tests of the opt-in families the run did not ask for, as pytest's ``-m`` deselects."""
    modules = left_out_modules(config, tier)
    if not modules:
        return
    dropped = [item for item in items if item.path.stem in modules]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if item.path.stem not in modules]
