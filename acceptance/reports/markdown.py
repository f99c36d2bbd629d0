"""The report as Markdown, for a repository or a ticket: the same blocks as the HTML file, its plots as
PNG files beside it (``<stem>-<plot>.png``).

Every text of a block comes from the evidence (a host name, a metric name, a message quoting a storage
path), so it is escaped: rendered by any Markdown engine (python-markdown, mkdocs', GitHub's), it makes
no element, and reads as the evidence wrote it. ``<`` and ``&`` become entities (python-markdown has no
backslash escape for ``<``), as does what opens a block at the start of a line; the characters that open
emphasis, code, a link (or a link definition, a footnote) or an attribute list are backslash-escaped.
``_`` inside a word stays (no engine reads it as emphasis there), so metric names keep their spelling.
"""

from __future__ import annotations

import re

from acceptance.reports.blocks import Block, Heading, Table, Text, Verdict
from acceptance.reports.table import render

# ``{`` and ``}`` open and close an attribute list (attr_list, on most mkdocs sites: ``{: onclick=...}``);
# ``[`` a link, a link definition, a footnote; python-markdown and CommonMark both take a backslash before them
_INLINE = re.compile(r"[\\`*\[\]!{}]|(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")
# what opens a block at a line's start: a heading, a quote, a list item, a setext underline, a table rule
_LINE_START = re.compile(r"^(\s*)([#>+=|:-]|\d+[.)])")


def inline(text: str) -> str:
    """``text`` escaped for where no block can start: a table cell (``|`` is the table's to escape)."""
    return _INLINE.sub(lambda m: "\\" + m.group(), text.replace("&", "&amp;").replace("<", "&lt;"))


def escape(text: str) -> str:
    """``text`` as Markdown that renders to that text, and no element, on one line or several."""
    text = inline(text)
    # a line indented 4 spaces after a blank line is code, a blank line ends the paragraph: neither is kept
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return "\n".join(_LINE_START.sub(lambda m: m.group(1) + _start(m.group(2)), line) for line in lines)


def _start(opener: str) -> str:
    # an entity, not a backslash: python-markdown has no backslash escape for = | :
    return f"{opener[:-1]}&#{ord(opener[-1])};"


def _cell(value: object) -> object:
    return inline(value) if isinstance(value, str) else value  # numbers go to the formatter as numbers


def _code(text: str) -> str:
    """A code span holding ``text`` whatever backticks it holds: fenced by one more than its longest run."""
    text = " ".join(text.split())
    fence = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    return f"{fence} {text} {fence}" if "`" in text else f"{fence}{text}{fence}"


def _verdict(block: Verdict) -> str:
    rows = [["verdict", f"**{inline(block.verdict)}**: {inline(block.note)}"]]
    rows += [[inline(k), _code(v) if k in ("command", "profile sha256") else inline(v)] for k, v in block.facts]
    return f"# Cluster acceptance: {escape(block.verdict)}\n\n" + render(["", ""], rows, style="markdown")


def _block(block: Block, stem: str, images: dict[str, bytes]) -> str:
    if isinstance(block, Verdict):
        return _verdict(block)
    if isinstance(block, Heading):
        return f"{'#' * block.level} {escape(block.text).replace(chr(10), ' ')}"
    if isinstance(block, Text):
        return f"_{escape(block.text)}_" if block.note else escape(block.text)
    if isinstance(block, Table):
        table = render(
            [inline(h) for h in block.head], [[_cell(c) for c in row] for row in block.rows], block.align, "markdown"
        )
        return f"{escape(block.folded)}:\n\n{table}" if block.folded else table
    name = f"{stem}-{block.name}.png"
    images[name] = block.png
    return f"![{escape(block.alt)}]({name})"


def document(blocks: list[Block], stem: str) -> tuple[str, dict[str, bytes]]:
    """The Markdown text and the PNG files it links to (name -> bytes), to be written beside it."""
    images: dict[str, bytes] = {}
    text = "\n\n".join(_block(b, stem, images) for b in blocks)
    return text.rstrip() + "\n", images
