"""The report as a list of blocks, written out by ``html`` (one self-contained file) and ``markdown``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Heading:
    text: str
    level: int = 2


@dataclass(frozen=True)
class Text:
    text: str
    note: bool = False  # small print: where a figure comes from, why something is missing


@dataclass(frozen=True)
class Table:
    head: Sequence[str]
    rows: Sequence[Sequence[object]]
    align: Sequence[str] | None = None  # l/r/c per column; default: numbers right, text left
    folded: str = ""  # HTML: folded under this line until opened (always open in print); Markdown: a caption


@dataclass(frozen=True)
class Image:
    name: str  # file stem beside the Markdown; the HTML inlines the PNG
    png: bytes
    alt: str


@dataclass(frozen=True)
class Verdict:
    verdict: str
    note: str
    facts: list[tuple[str, str]] = field(default_factory=list)


Block = Heading | Text | Table | Image | Verdict
