"""The report as a list of blocks, written out by ``html`` (one self-contained file) and ``markdown``."""

from __future__ import annotations

from dataclasses import dataclass, field

from acceptance.schema.report import Heading as Heading  # the blocks a family's section is made of
from acceptance.schema.report import Table as Table
from acceptance.schema.report import Text as Text


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
