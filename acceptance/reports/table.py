"""The one table renderer: every aligned plain-text table (terminal summary, CLI listings, sweeps)."""

from __future__ import annotations

from collections.abc import Sequence

from tabulate import tabulate

ALIGN = {"l": "left", "r": "right", "c": "center"}


def render(header: Sequence[str], rows: Sequence[Sequence[object]], align: Sequence[str] | None = None) -> str:
    """A plain table: a header, a rule, one line per row; ``align``: "l", "r" or "c" per column."""
    colalign = tuple(ALIGN[a] for a in align) if align else None
    return tabulate(
        [[str(cell) for cell in row] for row in rows],
        headers=list(header),
        tablefmt="simple",
        colalign=colalign,
        disable_numparse=True,
    )
