"""The report as Markdown, for a repository or a ticket: the same blocks as the HTML file, its plots as
PNG files beside it (``<stem>-<plot>.png``)."""

from __future__ import annotations

from acceptance.reports.blocks import Block, Heading, Table, Text, Verdict
from acceptance.reports.table import render


def _verdict(block: Verdict) -> str:
    rows = [["verdict", f"**{block.verdict}**: {block.note}"], *([k, f"`{v}`" if k in ("command", "profile sha256")
            else v] for k, v in block.facts)]  # fmt: skip
    return f"# Cluster acceptance: {block.verdict}\n\n" + render(["", ""], rows, style="markdown")


def _block(block: Block, stem: str, images: dict[str, bytes]) -> str:
    if isinstance(block, Verdict):
        return _verdict(block)
    if isinstance(block, Heading):
        return f"{'#' * block.level} {block.text}"
    if isinstance(block, Text):
        return f"_{block.text}_" if block.note else block.text
    if isinstance(block, Table):
        table = render(block.head, block.rows, block.align, style="markdown")
        return f"{block.folded}:\n\n{table}" if block.folded else table
    name = f"{stem}-{block.name}.png"
    images[name] = block.png
    return f"![{block.alt}]({name})"


def document(blocks: list[Block], stem: str) -> tuple[str, dict[str, bytes]]:
    """The Markdown text and the PNG files it links to (name -> bytes), to be written beside it."""
    images: dict[str, bytes] = {}
    text = "\n\n".join(_block(b, stem, images) for b in blocks)
    return text.rstrip() + "\n", images
