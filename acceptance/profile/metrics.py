"""The metric names a threshold may bound.

Each family is a pattern with named groups; a group named after a profile list (``op``, ``size``)
must take a value that list holds, so ``collectives.all_reduce.busbw_gbps@2G`` is rejected when the
profile does not sweep 2G. This is checked when the profile loads: a threshold key that no probe can
ever produce is a typo, and a typo must never silently turn a gate off.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from acceptance.profile.model import ProfileModel
from acceptance.profile.registry import FAMILIES as REGISTRY
from acceptance.profile.registry import family_of_metric
from acceptance.schema.bounds import Threshold
from acceptance.schema.family import Better, Family, Kind, Metric, Scale
from acceptance.schema.sizes import SizeError, canonical_size

__all__ = ["Better", "Kind", "Scale"]  # re-exported: the words of a figure's shape


@dataclass(frozen=True)
class Shape:
    """A metric shape of the registry, compiled with its family's prefix."""

    family: Family[Any]
    metric: Metric[Any]
    pattern: re.Pattern[str]

    @property
    def doc(self) -> str:
        return self.metric.doc


SHAPES: tuple[Shape, ...] = tuple(Shape(f, m, f.pattern(m)) for f in REGISTRY for m in f.metrics)
FAMILY_MODULES: dict[str, str] = {f.name: f.module for f in REGISTRY}  # in the order a run takes them


def family_of(metric: str) -> str:
    return metric.split(".", 1)[0]


def module_of(metric: str) -> str:
    """The test module that checks ``metric``: a threshold is enforced when that module was selected."""
    return FAMILY_MODULES.get(family_of(metric), f"test_{family_of(metric)}")


def shape_of(metric: str) -> Shape | None:
    """The registry's shape of ``metric`` (its size part spelled canonically), else None."""
    name = canonical_metric(metric)
    return next((s for s in SHAPES if s.pattern.match(name)), None)


def metric_problem(name: str, profile: ProfileModel) -> str | None:
    """Why ``name`` cannot be a metric of ``profile``, or None when it can."""
    for shape in SHAPES:
        match = shape.pattern.match(name)
        if not match:
            continue
        section = shape.family.section_of(profile)
        for group, value in match.groupdict().items():
            domain = shape.metric.domains.get(group)
            if domain is None or value is None:
                continue
            allowed = tuple(domain(section))
            if group == "size":
                try:
                    value = canonical_size(value)
                except SizeError as exc:
                    return str(exc)
            if value not in allowed:
                about = (domain.__doc__ or "").strip().split("\n")[0]  # a domain narrower than its section's list
                words = f"{group} {value!r} is not in this profile's list {list(allowed)}"
                return f"{words} ({about})" if about else words
        return None
    shapes = ", ".join(dict.fromkeys(s.doc for s in SHAPES))
    return f"no probe measures a metric of this name (known shapes: {shapes})"


def device_problem(name: str, device: str) -> str | None:
    """Why a threshold on ``name`` can never be checked by a run on ``device`` (``topology.device``), or
    None: a GPU-only figure bounded in a CPU profile would run the whole suite and then fail unchecked."""
    shape = shape_of(name)
    if shape is None or device in shape.metric.devices:
        return None
    on = " or ".join(shape.metric.devices)
    return f"threshold {name}: topology.device {device} never measures it (measured on {on} only)"


def bound_problem(name: str, bound: Threshold) -> tuple[str, str] | None:
    """The field of ``bound`` that can never hold, or always holds, for a figure never below its family's
    floor, and why; None when that is not so or not known. A gate that cannot fail checks nothing."""
    shape = shape_of(name)
    floor = shape.metric.floor if shape is not None else None
    if floor is None:
        return None
    never = f"this figure is never below {floor:g}"
    if bound.max is not None and bound.max < floor:
        return "max", f"max {bound.max:g} can never hold: {never}"
    if bound.eq is not None and bound.eq < floor:
        return "eq", f"eq {bound.eq:g} can never hold: {never}"
    if bound.ref is not None and bound.tol is not None and bound.ref + bound.tol * abs(bound.ref) < floor:
        return "ref", f"ref {bound.ref:g} ± {bound.tol:.0%} can never hold: {never}"
    if bound.min is not None and bound.min <= floor:
        return "min", f"min {bound.min:g} always holds: {never} (raise it, or remove it to record the figure)"
    return None


def builtin_bound(metric: str, profile: ProfileModel) -> Threshold | None:
    """The bound ``metric``'s shape declares where the profile sets none (``Metric.builtin``), else None."""
    shape = shape_of(metric)
    if shape is None or shape.metric.builtin is None:
        return None
    return shape.metric.builtin(shape.family.section_of(profile))


def scale(metric: str) -> Scale:
    """How a change of ``metric`` against a baseline run is measured (see ``Scale``): a shortfall under the
    median is a fraction already (points); a probe's wall time follows the suite's own job layout, the hottest
    GPU's temperature the room, a canary's difference between strategies is rounding noise under its bound:
    those are judged by their bound alone."""
    shape = shape_of(metric)
    return shape.metric.scale if shape is not None else "relative"


def better(metric: str) -> Better:
    """Which way ``metric`` improves: ``higher`` (bandwidth, throughput), ``lower`` (time, errors), or
    ``none`` (a count to match, or a name the registry does not know)."""
    shape = shape_of(metric)
    return shape.metric.better if shape is not None else "none"


def local(metric: str) -> bool:
    """Whether ``metric`` is a figure of a node's own hardware (``Metric.local``, else its family's): a
    failing one blames the nodes it names. A name no shape knows is its family's by its prefix (a test's
    own figure), else not local."""
    shape = shape_of(metric)
    if shape is None:
        family = family_of_metric(metric)
        return family is not None and family.local
    return shape.family.local if shape.metric.local is None else shape.metric.local


def kind(metric: str) -> Kind:
    """``correctness`` for a figure that counts wrong things (its bound is a sanity gate that no baseline
    moves), else ``performance``."""
    shape = shape_of(metric)
    return shape.metric.kind if shape is not None else "performance"


def canonical_metric(name: str) -> str:
    """Spell the size part of a metric key canonically: ``...@1024M`` -> ``...@1G``."""
    head, sep, size = name.rpartition("@")
    if not sep:
        return name
    try:
        return f"{head}@{canonical_size(size)}"
    except SizeError:
        return name
