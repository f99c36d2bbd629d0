"""``cluster-acceptance families``: what the suite checks, read from the family registry.

The table a user reads to discover the suite (family, marker, profile section, metric prefix, probes, test
module), every metric name with its better side, kind and baseline rule (``--metrics``), and the same as the
documentation's generated reference page (``--markdown``), which therefore cannot drift from the code.
"""

from __future__ import annotations

import argparse
import types
import typing
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from acceptance.profile.metrics import SHAPES
from acceptance.profile.registry import FAMILIES
from acceptance.reports.table import TERMINAL_COLUMNS, WIDE_HELP, Style, render
from acceptance.schema.family import Family

FAMILY_HEAD = ["family", "marker", "profile section", "metric prefix", "probes", "test module", "checks"]
METRIC_HEAD = ["metric", "better", "kind", "against a baseline", "measured on"]
SECTION_HEAD = ["key", "type", "default"]


def add(sub: Any) -> None:
    fam = sub.add_parser("families", help="what the suite checks: every family, its marker, section and probes")
    shown = fam.add_mutually_exclusive_group()
    shown.add_argument("--metrics", action="store_true", help="every metric name: better side, kind, baseline rule")
    shown.add_argument("--markdown", action="store_true", help="the documentation's reference page")
    fam.add_argument("--wide", action="store_true", help=WIDE_HELP)
    fam.set_defaults(func=cmd_families)


def cmd_families(args: argparse.Namespace) -> int:
    width = None if args.wide else TERMINAL_COLUMNS
    if args.markdown:
        print(markdown(), end="")
    elif args.metrics:
        print(render(METRIC_HEAD, metric_rows(), width=width))
    elif args.wide:
        print(render(FAMILY_HEAD, family_rows()))
    else:  # the section and the metric prefix are the family's name (``health:``, ``health.``): --wide has them
        narrow = [FAMILY_HEAD.index(h) for h in FAMILY_HEAD if h not in ("profile section", "metric prefix")]
        print(render([FAMILY_HEAD[i] for i in narrow], [[r[i] for i in narrow] for r in family_rows()], width=width))
    return 0


def family_rows() -> list[list[str]]:
    return [
        [f.name, f"-m {f.marker}", f"{f.name}:", f.prefix, ", ".join(f.probes), f"{f.module}.py", f.doc]
        for f in FAMILIES
    ]


def metric_rows(family: Family[Any] | None = None) -> list[list[str]]:
    return [
        [s.family.prefix + name, s.metric.better, s.metric.kind, s.metric.scale, ", ".join(s.metric.devices)]
        for s in SHAPES
        if family is None or s.family is family
        for name in s.metric.each_name
    ]


def section_rows(model: type[BaseModel], prefix: str = "") -> list[list[str]]:
    """Each key of a section with its type and default; a nested model's keys under its own name."""
    rows = []
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        nested = field.annotation if isinstance(field.annotation, type) else None
        if nested is not None and issubclass(nested, BaseModel):
            rows += section_rows(nested, f"{key}.")
            continue
        default = "required" if field.default is PydanticUndefined else f"`{field.default!r}`"
        rows.append([f"`{key}`", _type_name(field.annotation), default])
    return rows


def _type_name(annotation: Any) -> str:
    """A field's type in words: ``list[str]``, ``int | None``, ``Literal['auto', 'eager']``."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _type_name(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(a) for a in typing.get_args(annotation))
    if origin is typing.Literal:
        return "one of " + ", ".join(f"`{a}`" for a in typing.get_args(annotation))
    if origin is not None:
        inner = ", ".join(_type_name(a) for a in typing.get_args(annotation))
        return f"{getattr(origin, '__name__', str(origin))}[{inner}]"
    return "null" if annotation is type(None) else getattr(annotation, "__name__", str(annotation))


def markdown() -> str:
    style: Style = "markdown"
    out = [
        "# Families and metrics",
        "",
        "Generated from the family registry (`acceptance/profile/registry.py`) and the profile model by",
        "`cluster-acceptance families --markdown` when the site is built (`docs/hooks.py`). The families in",
        "the order a run takes them:",
        "",
        render(FAMILY_HEAD, family_rows(), style=style),
    ]
    for family in FAMILIES:
        out += ["", f"## {family.name}", "", family.doc[0].upper() + family.doc[1:] + ".", ""]
        out += [
            f"Profile section `{family.name}:`",
            "",
            render(SECTION_HEAD, section_rows(family.section), style=style),
        ]
        out += ["", "Metrics", "", render(METRIC_HEAD, metric_rows(family), style=style)]
    return "\n".join(out) + "\n"
