"""The one number formatter: figures the way people read them (312.4, 191,900, 0.93).

A leaf module (imports nothing of the package), so messages in every layer, probes included, and every
table print a figure the same way.
"""

from __future__ import annotations


def fmt(value: float | None) -> str:
    """Thousands separated and no decimals from 1000 up; four significant digits below."""
    if value is None:
        return "not a number"
    if isinstance(value, int) or abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.4g}"
