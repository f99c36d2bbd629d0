"""``cluster-acceptance report | compare | rebaseline | export``: evidence read for people and pipelines."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from acceptance.atomic_file import write_atomic
from acceptance.cli.outputs import check_outputs
from acceptance.evidence.merge import merge, notes
from acceptance.evidence.model import EvidenceDoc
from acceptance.evidence.store import read_evidence as read
from acceptance.evidence.verdict import verdict_of
from acceptance.profile import loader as profiles
from acceptance.profile.arguments import tolerance
from acceptance.reports import compare, export, html, markdown, overview, rebaseline


def add(sub: Any) -> None:
    rep = sub.add_parser("report", help="an HTML report (one self-contained file) and the same in Markdown beside it")
    rep.add_argument("evidence", type=Path, help="evidence.json, or its folder (a folder of node folders is merged)")
    rep.add_argument("-o", "--output", type=Path, help="HTML file (default: report.html beside the evidence)")
    rep.set_defaults(func=cmd_report)
    cmp = sub.add_parser("compare", help="two runs, figure by figure, worst change first; exit 1 on a regression")
    cmp.add_argument("old", type=Path, help="the earlier run (the handover): evidence.json or its folder")
    cmp.add_argument("new", type=Path, help="the later run")
    cmp.add_argument(
        "--tolerance",
        type=tolerance,
        help="for every figure: relative, or in points for a fraction of the median (default: the new profile's, 0.05)",
    )
    cmp.add_argument(
        "--profile",
        help="take the tolerances from this profile (name or YAML path), not from the one the new run recorded",
    )
    cmp.add_argument(
        "--fail-on-regression",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="exit 1 when a figure got worse beyond its tolerance and its noise, or turned FAIL against "
        "the same bound (default: on)",
    )
    cmp.add_argument(
        "--gated-only",
        action="store_true",
        help="count as regressions only the figures a bound gated in either run (default: every figure worse "
        "beyond its tolerance and noise, gated or not)",
    )
    cmp.set_defaults(func=cmd_compare)
    reb = sub.add_parser(
        "rebaseline", help="profile bounds (ref with a lower/upper relative bound) from a passed run's evidence"
    )
    reb.add_argument("evidence", type=Path)
    reb.add_argument(
        "--profile",
        help="bound the figures this profile bounds, replacing its entries whole (default: those the evidence gated)",
    )
    reb.add_argument("--all", action="store_true", help="bound every measured figure with a better side")
    reb.add_argument("--tolerance", action="append", default=[], metavar="[METRIC=]FRACTION",
                     help="default: the larger of 0.1 and the run's profile's baseline tolerance; METRIC may "
                          "be a glob, e.g. 'training.*=0.15' (repeatable)")  # fmt: skip
    reb.add_argument("-o", "--output", type=Path, help="YAML file to write (default: standard output)")
    reb.set_defaults(func=cmd_rebaseline)
    exp = sub.add_parser("export", help="figures as CSV: metric, value, unit, bound, verdict, node, gpu, source, test")
    exp.add_argument("evidence", type=Path)
    exp.add_argument("--csv", action="store_true", help="CSV (the default, and for now the only format)")
    exp.add_argument("-o", "--output", type=Path, help="file to write (default: standard output)")
    exp.set_defaults(func=cmd_export)


def load(path: Path) -> tuple[EvidenceDoc, str]:
    """An evidence file, or a folder holding one, or a folder of node folders (merged): data and its name."""
    if path.is_dir() and not (path / "evidence.json").is_file():
        parts = sorted(path.glob("*/evidence.json"))
        if not parts:
            raise ValueError(f"{path}: no evidence.json in this folder or in its subfolders")
        documents = [read(p) for p in parts]
        said = "; ".join([", ".join(p.parent.name for p in parts), *notes(documents)])
        return merge(documents), f"{path} (merged: {said})"
    file = path / "evidence.json" if path.is_dir() else path
    return read(file), str(file)


def _refuse_bad_output(output: Path | None, evidence: Path) -> None:
    if output is not None:
        check_outputs([("-o", output)], [evidence])


def _write(output: Path | None, text: str) -> None:
    if output is None:
        sys.stdout.write(text)
    else:
        write_atomic(output, text)
        print(f"wrote {output}", file=sys.stderr)


def cmd_report(args: argparse.Namespace) -> int:
    folder = args.evidence if args.evidence.is_dir() else args.evidence.parent
    output: Path = args.output or folder / "report.html"
    check_outputs([("-o", output), ("-o (its Markdown)", output.with_suffix(".md"))], [args.evidence])
    data, origin = load(args.evidence)
    blocks = overview.blocks(data, origin)
    title = f"Cluster acceptance: {verdict_of(data)} ({data.profile.name})"
    text, images = markdown.document(blocks, output.stem)
    pictures = [(f"-o (its image {name})", output.parent / name) for name in images]
    check_outputs([("-o", output), ("-o (its Markdown)", output.with_suffix(".md")), *pictures], [args.evidence])
    write_atomic(output, html.document(blocks, title))
    for name, png in images.items():
        write_atomic(output.parent / name, png)
    write_atomic(output.with_suffix(".md"), text)
    print(f"wrote {output} and {output.with_suffix('.md')}" + (f" (+{len(images)} PNG)" if images else ""))
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    (old, old_name), (new, new_name) = load(args.old), load(args.new)
    names = (old_name, new_name)
    profile = profiles.load(args.profile).resolved if args.profile else None
    found = compare.rows(old, new, args.tolerance, profile, args.gated_only)
    out = [*compare.summary(old, new, found, names)]
    diffs = compare.differences(old, new)
    out += ["differences:", *(f"  {d}" for d in diffs)] if diffs else ["differences: none in profile, software, env"]
    print("\n".join([*out, "", compare.table(found)]))
    regressed = any(r.regression for r in found)
    return 1 if regressed and args.fail_on_regression else 0


def cmd_rebaseline(args: argparse.Namespace) -> int:
    _refuse_bad_output(args.output, args.evidence)
    data, origin = load(args.evidence)
    rebaseline.refuse_unless_passed(data, origin)
    profile = profiles.load(args.profile).resolved if args.profile else None
    tol = rebaseline.tolerances(args.tolerance)
    figures = rebaseline.chosen(data, profile, args.all)
    refused = rebaseline.left_out(figures)
    for line in refused:
        print(f"cluster-acceptance rebaseline: left out {line}", file=sys.stderr)
    if len(refused) == len(figures):
        raise ValueError(f"{origin}: no measured figure to bound (try --all, or another --profile)")
    _write(args.output, rebaseline.document(data, origin, figures, tol, profile, _extended(args.profile, data)))
    return 0


def _extended(given: str | None, data: EvidenceDoc) -> str:
    """What the rebaselined profile extends: the profile given, else the run's; by name where this machine
    knows the name, else by its absolute path, so the file loads from wherever it is saved."""
    known = profiles.available()
    if given is None:
        name = data.profile.name
        return name if name in known else data.profile.path or name
    return given if given in known else str(profiles.find(given).resolve())


def cmd_export(args: argparse.Namespace) -> int:
    _refuse_bad_output(args.output, args.evidence)
    data, _ = load(args.evidence)
    _write(args.output, export.csv_text(data))
    return 0
