"""A threshold's bounds: whether a value meets them, in words, and as numbers (for drawing them)."""

from __future__ import annotations

import math
from typing import Annotated

from pydantic import Field, model_validator

from acceptance.schema.fields import Strict


class Threshold(Strict):
    min: float | None = None
    max: float | None = None
    eq: float | None = None
    ref: float | None = None
    tol: Annotated[float, Field(ge=0)] | None = None  # relative, both sides of ref: 0.05 = 5%
    # ReFrame's reference shape: relative bounds on each side of ref, lower <= 0 <= upper; one may be left out
    lower: Annotated[float, Field(ge=-1, le=0)] | None = None
    upper: Annotated[float, Field(ge=0)] | None = None
    xfail: str | None = None
    source: str | None = None  # where the bound comes from

    @model_validator(mode="after")
    def _one_kind(self) -> Threshold:
        if self.min is None and self.max is None and self.eq is None and self.ref is None:
            raise ValueError("a threshold needs at least one of min, max, eq, ref")
        relative = [k for k in ("tol", "lower", "upper") if getattr(self, k) is not None]
        if (self.ref is None) != (not relative):
            raise ValueError(
                "ref and tol go together (tol is relative: 0.05 = 5%), or ref with lower and/or upper "
                "(relative bounds below and above ref, ReFrame-style: lower -0.1 = 10% under ref)"
            )
        if self.tol is not None and len(relative) > 1:
            raise ValueError("tol is both sides of ref at once: give tol, or lower and/or upper, not both")
        if self.eq is not None and (self.min is not None or self.max is not None):
            raise ValueError("eq cannot be combined with min or max")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min {self.min:g} is above max {self.max:g}: no value can meet both")
        return self


# a correctness figure (wrong elements, missing ranks, GPUs that disagree) is never mere information: where the
# profile sets no bound, its metric declares this one (``Metric.builtin``)
MUST_BE_ZERO = Threshold(eq=0, source="built-in: correctness is never mere information")


def must_be_zero(_section: object) -> Threshold:
    """``Metric.builtin`` of a correctness count: 0, whatever the family's section says."""
    return MUST_BE_ZERO


def evaluate(threshold: Threshold, value: float) -> tuple[bool, str]:
    """Whether ``value`` meets ``threshold``, and the bound in words (``>= 350``)."""
    ok = not (isinstance(value, float) and math.isnan(value))
    parts: list[str] = []
    for low, high, words in _sides(threshold):
        parts.append(words)
        ok = ok and (low is None or value >= low) and (high is None or value <= high)
    return ok, " and ".join(parts)


def limits(threshold: Threshold) -> tuple[float | None, float | None]:
    """The lowest and highest value ``threshold`` lets through (None: unbounded on that side)."""
    lows = [low for low, _, _ in _sides(threshold) if low is not None]
    highs = [high for _, high, _ in _sides(threshold) if high is not None]
    return (max(lows) if lows else None), (min(highs) if highs else None)


def _sides(t: Threshold) -> list[tuple[float | None, float | None, str]]:
    """(lowest, highest, words) per bound the threshold sets; ref's relative bounds become absolute ones."""
    out: list[tuple[float | None, float | None, str]] = []
    if t.min is not None:
        out.append((t.min, None, f">= {t.min:g}"))
    if t.max is not None:
        out.append((None, t.max, f"<= {t.max:g}"))
    if t.eq is not None:
        out.append((t.eq, t.eq, f"== {t.eq:g}"))
    if t.ref is not None and t.tol is not None:
        out.append((t.ref - t.tol * abs(t.ref), t.ref + t.tol * abs(t.ref), f"{t.ref:g} ± {t.tol:.0%}"))
    if t.ref is not None and t.lower is not None:
        low = t.ref + t.lower * abs(t.ref)
        out.append((low, None, f">= {low:.6g} ({t.ref:g} {t.lower * 100:+g}%)"))
    if t.ref is not None and t.upper is not None:
        high = t.ref + t.upper * abs(t.ref)
        out.append((None, high, f"<= {high:.6g} ({t.ref:g} {t.upper * 100:+g}%)"))
    return out
