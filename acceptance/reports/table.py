"""The one table renderer: every table of the terminal, the CLI, Markdown and HTML, through tabulate.

Numbers in cells go through the one number formatter (``acceptance.numbers.fmt``); a missing figure
reads ``-``. Cells are escaped for their target (``|`` in Markdown, ``<`` in HTML) except :class:`Raw`.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Iterable, Sequence
from typing import Literal

from tabulate import tabulate

from acceptance.numbers import fmt

Style = Literal["text", "markdown", "html"]
ALIGN = {"l": "left", "r": "right", "c": "center", "left": "left", "right": "right", "center": "center"}
_FORMATS = {"text": "simple", "markdown": "github", "html": "unsafehtml"}
_NUMERIC = re.compile(r"^[-+]?[\d,]*\.?\d+(e[-+]?\d+)?\s*%?$", re.IGNORECASE)


class Raw(str):
    """A cell already written in the target's markup (an HTML span): rendered as is, never escaped."""

    __slots__ = ()


def _cell(value: object, style: Style) -> str:
    if isinstance(value, Raw):
        return str(value)
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        text = "-"
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        text = fmt(value)
    else:
        text = str(value).replace("\n", " ")
    if style == "markdown":
        return text.replace("|", "\\|")
    return html.escape(text) if style == "html" else text


def _numeric(cell: str) -> bool:
    return cell in ("", "-") or bool(_NUMERIC.match(cell.replace("±", "").replace(" ", "")))


def _aligns(rows: list[list[str]], width: int) -> list[str]:
    """Numbers right, text left (the first column always left); a column of numbers and dashes is numbers."""
    out = []
    for i in range(width):
        cells = [row[i] for row in rows if i < len(row)]
        numbers = i > 0 and any(c not in ("", "-") for c in cells) and all(_numeric(c) for c in cells)
        out.append("right" if numbers else "left")
    return out


TERMINAL_COLUMNS = 120  # the terminal a table of the CLI fits by default (its --wide prints rows whole)
WIDE_HELP = f"each row on one line, however wide (default: long cells wrap to fit {TERMINAL_COLUMNS} columns)"
NARROWEST_COLUMN = 12  # a column wrapped narrower than this reads as one word a line
_GAP = 2  # tabulate's space between two columns, in its simple and plain formats


def fitted_widths(rows: Sequence[Sequence[str]], width: int | None) -> list[int | None] | None:
    """The most each column may hold for the table to fit ``width`` characters (tabulate's ``maxcolwidths``:
    a longer cell wraps within its column): the widest column is narrowed first, none below
    ``NARROWEST_COLUMN``. None: no limit (``width`` None, or the table fits as it is)."""
    if width is None or not rows:
        return None
    natural = [max((len(row[i]) for row in rows if i < len(row)), default=0) for i in range(len(rows[0]))]
    widths = list(natural)
    budget = width - _GAP * (len(widths) - 1)
    while sum(widths) > budget:
        widest = max(range(len(widths)), key=lambda i: widths[i])
        if widths[widest] <= NARROWEST_COLUMN:
            break  # as narrow as it reads: the table stays wider than asked
        widths[widest] -= 1
    return [w if w < n else None for w, n in zip(widths, natural, strict=True)] if widths != natural else None


def render(
    header: Sequence[str],
    rows: Iterable[Sequence[object]],
    align: Sequence[str] | None = None,
    style: Style = "text",
    width: int | None = None,
) -> str:
    """A table: ``header`` over ``rows``. ``align`` per column: l/r/c (default: numbers right, text left).

    ``text``: a header, a rule, one line per row (terminals), or where ``width`` is given the long cells
    wrapped within their columns so that no line is wider (``fitted_widths``); ``markdown``: a GitHub pipe
    table; ``html``: a ``<table>``."""
    body = [[_cell(c, style) for c in row] for row in rows]
    colalign = [ALIGN[a] for a in align] if align is not None else _aligns(body, len(header))
    heads = [_cell(h, style) for h in header]
    limits = fitted_widths([heads, *body], width) if style == "text" else None
    text = tabulate(
        body, headers=heads, tablefmt=_FORMATS[style], colalign=colalign, disable_numparse=True, maxcolwidths=limits
    )
    return "\n".join(line.rstrip() for line in str(text).splitlines())


def columns(rows: Iterable[Sequence[str]], align: Sequence[str], width: int | None = None) -> str:
    """Header-less fixed columns (nccl-tests' layout): each cell padded to its column, lines right-trimmed;
    ``width``: long cells wrapped within their columns so that no line is wider."""
    body = [list(row) for row in rows]
    text = tabulate(
        body,
        tablefmt="plain",
        colalign=[ALIGN[a] for a in align],
        disable_numparse=True,
        maxcolwidths=fitted_widths(body, width),
    )
    return "\n".join(line.rstrip() for line in str(text).splitlines())
