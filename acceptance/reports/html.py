"""The report as one self-contained HTML file: plots inline as base64 PNG, no network, print-friendly.

A small script checks the page when it has loaded (every plot decoded to a picture of some size, no
script error) and writes the outcome into the title (``report-ok`` or ``report-error: ...``), so a
headless browser can tell a broken page from a good one.
"""

from __future__ import annotations

import base64
import html
import re
from typing import get_args

from acceptance.reports.blocks import Block, Heading, Image, Table, Text, Verdict
from acceptance.reports.table import Raw, render
from acceptance.verdicts import ORDER, FigureVerdict

# the words a cell is coloured by: a figure's verdict as the report shows it (upper case), a run's verdict
CHECK_VERDICTS = frozenset([*(v.upper() for v in get_args(FigureVerdict)), *ORDER])

CSS = """
:root { --pass: #1b7f3b; --fail: #c62828; --warn: #b26a00; --ink: #1d2733; --muted: #5f6b7a; --line: #d9dee5; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; color: var(--ink);
       margin: 0 auto; padding: 24px 32px 48px; max-width: 1180px; }
h1 { font-size: 26px; margin: 0 0 4px; }
h2 { font-size: 19px; margin: 32px 0 10px; padding-bottom: 4px; border-bottom: 2px solid var(--line); }
.banner { border-radius: 8px; padding: 16px 20px; margin-bottom: 12px; color: #fff; background: var(--warn); }
.banner.v-PASS { background: var(--pass); } .banner.v-FAIL { background: var(--fail); }
.banner .note { opacity: .92; margin-top: 2px; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 2px 16px; margin: 8px 0 0; font-size: 13px; }
dl.facts dt { color: var(--muted); } dl.facts dd { margin: 0; overflow-wrap: anywhere; }
nav { font-size: 13px; margin: 10px 0 0; } nav a { margin-right: 12px; color: #2b5f9e; text-decoration: none; }
.scroll { overflow-x: auto; margin: 6px 0 14px; }
table { border-collapse: collapse; font-size: 12.5px; width: auto; }
th, td { border-bottom: 1px solid var(--line); padding: 3px 9px; vertical-align: top; }
th, td[style*="right"] { white-space: nowrap; }
th { background: #f3f5f8; text-align: left; font-weight: 600; }
tbody tr:nth-child(even) { background: #fafbfc; }
td:nth-child(n+2) { font-variant-numeric: tabular-nums; }
.v { font-weight: 700; padding: 1px 6px; border-radius: 4px; font-size: 11.5px; color: #fff; background: var(--warn); }
.v.v-PASS { background: var(--pass); } .v.v-FAIL, .v.v-BASELINE_FAIL { background: var(--fail); }
.v.v-INFO { background: #8a94a3; }
details { margin: 6px 0 14px; } summary { cursor: pointer; color: #2b5f9e; }
figure { margin: 8px 0 18px; } figure img { max-width: 100%; height: auto; border: 1px solid var(--line); }
figcaption, p.note { color: var(--muted); font-size: 12.5px; }
@page { size: A4 landscape; margin: 12mm; }
@media print {
  body { padding: 0; max-width: none; font-size: 11px; }
  nav { display: none; }
  .banner, .v { -webkit-print-color-adjust: exact; print-color-adjust: exact; }
  h2 { break-after: avoid; } figure, tr { break-inside: avoid; }
  .scroll { overflow: visible; } th, td { white-space: normal; }
}
"""

SELF_CHECK = """
window.__errors = [];
window.addEventListener("error", function (e) { window.__errors.push(String(e.message || e)); });
window.addEventListener("beforeprint", function () {
  document.querySelectorAll("details").forEach(function (d) { d.open = true; });
});
window.addEventListener("load", function () {
  var bad = [];
  var imgs = document.querySelectorAll("img");
  imgs.forEach(function (img) { if (!img.complete || img.naturalWidth < 10) bad.push(img.alt); });
  var problems = window.__errors.concat(bad.map(function (a) { return "plot not drawn: " + a; }));
  document.title = problems.length ? "report-error: " + problems.join("; ") : "report-ok: " + imgs.length + " plots";
  document.body.setAttribute("data-self-check", problems.length ? "error" : "ok");
});
"""


def _anchor(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _cell(value: object) -> object:
    if isinstance(value, str) and value in CHECK_VERDICTS:
        return Raw(f'<span class="v v-{value}">{value}</span>')
    return value


def _table(block: Table) -> str:
    rows = [[_cell(c) for c in row] for row in block.rows]
    table = f'<div class="scroll">{render(block.head, rows, block.align, style="html")}</div>'
    return f"<details><summary>{html.escape(block.folded)}</summary>{table}</details>" if block.folded else table


def _verdict(block: Verdict) -> str:
    facts = "".join(f"<dt>{html.escape(k)}</dt><dd>{html.escape(v)}</dd>" for k, v in block.facts)
    return (
        f'<div class="banner v-{block.verdict}"><h1>Cluster acceptance: {block.verdict}</h1>'
        f'<div class="note">{html.escape(block.note)}</div></div><dl class="facts">{facts}</dl>'
    )


def _image(block: Image) -> str:
    data = base64.b64encode(block.png).decode("ascii")
    alt = html.escape(block.alt)
    return f'<figure><img src="data:image/png;base64,{data}" alt="{alt}"><figcaption>{alt}</figcaption></figure>'


def _block(block: Block) -> str:
    if isinstance(block, Verdict):
        return _verdict(block)
    if isinstance(block, Heading):
        return f'<h{block.level} id="{_anchor(block.text)}">{html.escape(block.text)}</h{block.level}>'
    if isinstance(block, Text):
        return f'<p class="{"note" if block.note else ""}">{html.escape(block.text)}</p>'
    if isinstance(block, Table):
        return _table(block)
    return _image(block)


def document(blocks: list[Block], title: str) -> str:
    headings = [b for b in blocks if isinstance(b, Heading) and b.level == 2]
    nav = "".join(f'<a href="#{_anchor(h.text)}">{html.escape(h.text.split(" (")[0])}</a>' for h in headings)
    lead = blocks[:1] if blocks and isinstance(blocks[0], Verdict) else []
    first = "".join(_block(b) for b in lead)
    rest = "\n".join(_block(b) for b in blocks[len(lead) :])
    return (
        '<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{html.escape(title)}</title>\n<style>{CSS}</style>\n<script>{SELF_CHECK}</script>\n</head>\n<body>\n"
        f"{first}\n<nav>{nav}</nav>\n{rest}\n</body>\n</html>\n"
    )
