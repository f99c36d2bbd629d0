"""The one number formatter: figures the way people read them (312.4, 191,900, 0.93); and the one spread
of a figure's timed windows.

A leaf module (imports nothing of the package), so messages in every layer, probes included, and every
table print a figure the same way.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from decimal import Decimal

# from here up a figure prints as 1.235e+15: thousands separators past this are digits nobody reads
SCIENTIFIC_FROM = 1e15


def fmt(value: float | None) -> str:
    """Thousands separated and no decimals from 1000 up; four significant digits below; four significant
    digits with an exponent from SCIENTIFIC_FROM up (1e308 in 8 characters, an int of any size too)."""
    if value is None:
        return "not a number"
    if abs(value) >= SCIENTIFIC_FROM:
        try:
            return f"{float(value):.4g}"
        except OverflowError:  # an int too large for a float
            return f"{Decimal(value).normalize():.4g}"
    if isinstance(value, int) or abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.4g}"


def spread(values: Sequence[float]) -> float:
    """(max - min) / median of a figure's timed windows (the figure is their median): 0 for fewer than two."""
    middle = statistics.median(values) if values else 0.0
    return (max(values) - min(values)) / middle if len(values) > 1 and middle else 0.0
