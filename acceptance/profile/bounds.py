"""A threshold's bounds: whether a value meets them, in words, and as numbers (for drawing them)."""

from __future__ import annotations

import math

from acceptance.profile.model import Threshold


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
