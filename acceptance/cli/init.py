"""``cluster-acceptance init``: a first profile for this cluster, from this node and the reference table;
``cluster-acceptance references``: the table itself (``--markdown``: the documentation's page of it).

``init`` finds the GPUs (model, count, NVLink links), an NVSwitch and NVLS, the network adapters and the
CPUs of the node it runs on (``acceptance.probes.node_survey``), and writes ``thresholds/NAME.yaml`` (found
by ``--cluster-profile NAME`` from this folder), each bound sourced to its reference row or to the floor its
links give (``acceptance.profile.floors``). An existing file
is never replaced without ``--force``: a profile is edited by hand after it is written.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path
from typing import Any, TextIO

from acceptance.atomic_file import write_atomic
from acceptance.numbers import fmt
from acceptance.plugin.options import positive_int
from acceptance.profile import loader as profiles
from acceptance.profile.initial import InitialProfile, profile_for
from acceptance.profile.node_facts import NodeFacts, facts_from_json
from acceptance.profile.references import Reference, ReferenceTable, table
from acceptance.reports.table import TERMINAL_COLUMNS, WIDE_HELP, render
from acceptance.schema.fields import ProfileName

DEFAULT_NAME = "cluster"
REFERENCE_HEAD = ["figure", "GPU", "setup", "value", "bound init writes", "source"]


class InitError(Exception):
    """Bad input to init: one line and the usage-error status."""


def add(sub: Any) -> None:
    init = sub.add_parser(
        "init",
        help="a first profile for this cluster: this node's GPUs, NVLink, NVLS and NICs, bounds from public references",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    init.add_argument("--name", default=DEFAULT_NAME, help=f"the profile's name (default: {DEFAULT_NAME})")
    init.add_argument(
        "--nodes", type=positive_int, default=1, help="nodes in the cluster, as --cluster-nodes (default: 1)"
    )
    init.add_argument(
        "-o", "--output", type=Path, help="the profile file to write (default: thresholds/NAME.yaml in this folder)"
    )
    init.add_argument("--force", action="store_true", help="replace the file if it exists")
    init.set_defaults(func=cmd_init)
    refs = sub.add_parser("references", help="the reference table: what a healthy machine measures, with sources")
    refs.add_argument("--markdown", action="store_true", help="the documentation's page of it")
    refs.add_argument("--wide", action="store_true", help=WIDE_HELP)
    refs.set_defaults(func=cmd_references)


def cmd_init(args: argparse.Namespace, facts: NodeFacts | None = None, out: TextIO | None = None) -> int:
    """``facts``: the node as described (tests); by default, as the survey probe reads it."""
    out = out if out is not None else sys.stdout  # the stream of the call, not the one at import
    name = _checked_name(args.name)
    path: Path = args.output or profiles.LOCAL_DIR / f"{name}.yaml"
    if path.exists() and not args.force:
        raise InitError(f"{path} exists: pass --force to replace it, or --name/--output for another file")
    if path.is_dir():
        raise InitError(f"{path}: is a folder, not a profile file")
    refs = table()
    facts = facts if facts is not None else survey()
    written = profile_for(facts, name, args.nodes, refs)
    try:
        write_atomic(path, written.text)
    except OSError as exc:  # a folder that cannot be made, a read-only or full file system: one line, exit 4
        raise InitError(f"cannot write {path}: {exc.strerror or exc}") from None
    profiles.load(str(path))  # the file must load as the suite will read it; a failure here is a bug
    _report(out, facts, written, path, refs, args.nodes)
    return 0


def survey() -> NodeFacts:
    """This node read by the survey probe in a process of its own (NVML and torch stay out of this one)."""
    import subprocess

    done = subprocess.run(
        [sys.executable, "-m", "acceptance.probes.node_survey"], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        probe = "python -m acceptance.probes.node_survey"
        raise InitError(f"reading this node failed ({probe}, exit {done.returncode}): {last}")
    return facts_from_json(done.stdout)


def _checked_name(name: str) -> str:
    from pydantic import TypeAdapter, ValidationError

    try:
        return str(TypeAdapter(ProfileName).validate_python(name))
    except ValidationError as exc:
        raise InitError(f"--name: {exc.errors(include_url=False)[0]['msg']}") from None


def _report(
    out: TextIO, facts: NodeFacts, written: InitialProfile, path: Path, refs: ReferenceTable, nodes: int
) -> None:
    print(f"found: {facts.summary(refs)}", file=out)
    for note in facts.notes:
        print(f"  {note}", file=out)
    print(f"wrote {path}: profile {written.name} ({written.device})", file=out)
    for bound in written.bounds:
        print(f"  {bound.text()}: {bound.words}", file=out)
    if written.device == "cuda" and not written.bounds:
        print("  no reference fits these GPUs and NVML told no link: every figure is recorded, none is gated", file=out)
    where = "" if path.parent.resolve() == profiles.LOCAL_DIR.resolve() else f" (run from {path.parent.parent})"
    target = written.name if not where else str(path)
    every = f"pytest --cluster-profile {target} tests_cluster/   (or: cluster-acceptance run --profile {target})"
    if nodes == 1:
        print(f"next: {every}", file=out)
        return
    # the next command runs on this one node, where a profile of several nodes would wait for the others
    print(f"next, on this node alone (the profile says {nodes} nodes): cluster-acceptance run --profile {target} "
          "-- --cluster-set topology.nodes=1", file=out)  # fmt: skip
    print(f"then on every node: {every}", file=out)


def cmd_references(args: argparse.Namespace) -> int:
    refs = table()
    if args.markdown:
        print(markdown(refs), end="")
    else:
        rows = [_row(refs, r) for r in refs.references]
        print(render(REFERENCE_HEAD, rows) if args.wide else _records(rows))
    return 0


def _setup_words(refs: ReferenceTable, row: Reference) -> str:
    parts = []
    if row.nodes is not None:
        parts.append(f"{row.nodes} node(s)")
    if row.gpus_per_node is not None:
        parts.append(f"{row.gpus_per_node} GPUs per node")
    if row.nvls is not None:
        parts.append("NVLS on" if row.nvls else "NVLS off")
    if row.nic is not None:
        parts.append(refs.nics[row.nic].label)
    if row.min_size is not None:
        parts.append(f"messages >= {row.min_size}")
    if row.max_size is not None:
        parts.append(f"messages <= {row.max_size}{' B' if row.max_size.isdigit() else ''}")
    return ", ".join(parts) or "any"


def _row(refs: ReferenceTable, row: Reference) -> list[object]:
    gpu = refs.gpus[row.gpu].label if row.gpu else "any"
    kind = {"typical": "~", "peak": "peak ", "line_rate": "line rate ", "bar": "bar "}[row.kind]
    bound = f"{'>=' if row.bound == 'min' else '<='} {fmt(row.limit())} ({row.floor.share()})"
    value = f"{kind}{fmt(row.value)} {row.unit}".rstrip()
    return [row.figure, gpu, _setup_words(refs, row), value, bound, row.source]


def _records(rows: list[list[object]], width: int = TERMINAL_COLUMNS) -> str:
    """The reference rows for a terminal of ``width`` columns: each row a paragraph (the figure, its GPU and
    setup, its value and the bound init writes; then its source, indented), wrapped to fit. Six columns of
    which two are sentences do not fit 120 columns as a table; ``--wide`` prints the table."""
    out: list[str] = []
    for figure, gpu, setup, value, bound, source in rows:
        head = f"{figure} ({gpu}; {setup}): {value}; init writes {bound}"
        out += textwrap.wrap(head, width, subsequent_indent="    ")
        out += textwrap.wrap(f"source: {source}", width, initial_indent="    ", subsequent_indent="    ")
    return "\n".join(out)


def markdown(refs: ReferenceTable) -> str:
    """docs/references.md: generated from the table, so that the page cannot drift from it."""
    lines = [
        "# Reference figures",
        "",
        "<!-- generated by `cluster-acceptance references --markdown` from acceptance/profile/references.yaml -->",
        "",
        "What a healthy machine measures, per GPU model and fabric, each with its public source. "
        "`cluster-acceptance init` writes a profile's bounds from the rows that fit the node it runs on, and "
        "the report shows the row beside each figure it describes (its *reference* column).",
        "",
        "| " + " | ".join(REFERENCE_HEAD) + " |",
        "|" + "---|" * len(REFERENCE_HEAD),
    ]
    for row in refs.references:
        cells = [str(c).replace("|", "\\|") for c in _row(refs, row)]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "## Why each bound is that fraction of its reference", ""]
    lines += [f"- **{key}** ({floor.share()}): {floor.why}" for key, floor in refs.floors.items()]
    lines += ["", "## GPU models and network adapters", ""]
    lines += [f"- **{m.label}** (`{key}`): NVML names matching `{m.name_pattern}`; NVLS on NVSwitch systems: "
              f"{'yes' if m.nvls else 'no'}" for key, m in refs.gpus.items()]  # fmt: skip
    lines += [f"- **{n.label}** (`{key}`): link layer {n.link_layer}, {n.gbps} Gb/s" for key, n in refs.nics.items()]
    return "\n".join(lines) + "\n"
