"""``cluster-acceptance``: the installed suite, profiles, evidence files, reports, comparisons, and the
collective sweep."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

import acceptance
from acceptance.atomic_file import write_atomic
from acceptance.cli import container, families, init, reports, sweep
from acceptance.cli.outputs import check_outputs
from acceptance.cli.usage import USAGE_ERROR, Parser
from acceptance.evidence.folder import EvidenceFolderError
from acceptance.evidence.junit import junit_xml
from acceptance.evidence.merge import merge
from acceptance.evidence.merge import notes as merge_notes
from acceptance.evidence.store import EvidenceError, as_data, read_evidence
from acceptance.json_types import JSONObject, JSONValue
from acceptance.profile import loader as profiles
from acceptance.profile.arguments import positive_seconds
from acceptance.profile.tiers import TIER_NAMES
from acceptance.reports.table import TERMINAL_COLUMNS, WIDE_HELP, columns
from acceptance.run.launcher import ProbeError
from acceptance.run.placement import TopologyError
from acceptance.schema.collectives import COLLECTIVE_OPS
from acceptance.schema.dtypes import DTYPE_NAMES


class CliError(Exception):
    """A command that cannot go on for its input; one line without a traceback (exit status 4, as pytest)."""


def main(argv: list[str] | None = None) -> int:
    top = parser()
    # `run` passes what it does not know to pytest; every other command takes only its own options
    args, rest = top.parse_known_args(argv)
    if rest and args.command != "run":
        top.error(f"unrecognized arguments: {' '.join(rest)}")
    args.pytest_args = [a for a in rest if a != "--"] if args.command == "run" else []
    try:
        return int(args.func(args))
    except (
        CliError,
        container.EntryError,
        init.InitError,
        EvidenceError,
        EvidenceFolderError,
        profiles.ProfileError,
        TopologyError,
        ValueError,
    ) as exc:
        print(f"cluster-acceptance {args.command}: {exc}", file=sys.stderr)
        return USAGE_ERROR
    except ProbeError as exc:  # the input was fine; the measurement failed, and its evidence says so
        print(f"cluster-acceptance {args.command}: {exc}", file=sys.stderr)
        return int(pytest.ExitCode.TESTS_FAILED)
    except BrokenPipeError:  # `... | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def parser() -> argparse.ArgumentParser:
    top = Parser(prog="cluster-acceptance", description=__doc__)
    top.add_argument("--version", action="version", version=f"%(prog)s {acceptance.__version__}")
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run = sub.add_parser(
        "run",
        help="the acceptance suite as installed (no checkout needed); other arguments go to pytest",
        usage="%(prog)s [--profile NAME] [--tier TIER] [--evidence DIR] [PYTEST-ARGS...]",
    )
    run.add_argument("--profile", default=os.environ.get("CLUSTER_PROFILE"), help="default: $CLUSTER_PROFILE")
    # as --profile and --evidence: run's own spelling of the suite's option (--cluster-tier), which pytest
    # would otherwise be given as an argument it does not know
    run.add_argument("--tier", choices=TIER_NAMES, help="quick, standard or burn-in (default: the profile's)")
    run.add_argument("--evidence", help="evidence folder (default: a new folder under ./acceptance-results/)")
    run.set_defaults(func=cmd_run)
    listed = sub.add_parser("list", help="the profiles that --cluster-profile NAME finds")
    listed.add_argument("--wide", action="store_true", help=WIDE_HELP)
    listed.set_defaults(func=cmd_list)
    families.add(sub)
    init.add(sub)
    show = sub.add_parser("show", help="a profile as resolved (extends merged, overrides applied) and its sha256")
    show.add_argument("name", help="profile name or YAML path")
    show.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE", help="as --cluster-set")
    show.add_argument("--get", metavar="KEY.PATH", help="print only this key's value, e.g. topology.gpus_per_node")
    show.add_argument(
        "--tier",
        choices=TIER_NAMES,
        help="with this tier's settings (the profile's tiers:) applied, as --cluster-tier; default: the profile's tier",
    )
    show.set_defaults(func=cmd_show)
    junit = sub.add_parser("junit", help="rebuild JUnit XML from an evidence file")
    junit.add_argument("evidence", type=Path)
    junit.add_argument("-o", "--output", type=Path, help="file to write (default: standard output)")
    junit.set_defaults(func=cmd_junit)
    mrg = sub.add_parser("merge", help="one evidence file from several (the nodes of a run, or several runs)")
    mrg.add_argument("evidence", type=Path, nargs="+")
    mrg.add_argument("-o", "--output", type=Path, required=True, help="merged evidence file to write")
    mrg.add_argument("--junit", type=Path, help="also write JUnit XML of the merged evidence here")
    mrg.set_defaults(func=cmd_merge)
    reports.add(sub)
    add_sweep(sub)
    return top


def add_sweep(sub: Any) -> None:
    sw = sub.add_parser(
        "sweep",
        help="collective bandwidth sweep without pytest or MPI, printed like nccl-tests",
        description="Like nccl-tests' all_reduce_perf -b 1M -e 4G -f 2, through torchrun and torch.distributed. "
        "Sizes are binary (1M = 2^20 bytes), bandwidths decimal (GB/s = 1e9 bytes/s).",
    )
    sw.add_argument("-b", "--minbytes", default="1M", help="smallest message size (default: 1M)")
    sw.add_argument("-e", "--maxbytes", help="largest message size (default: 1G; 16M on the CPU)")
    sw.add_argument("-f", "--stepfactor", type=int, default=2, help="size multiplier between steps (default: 2)")
    sw.add_argument(
        "--ops",
        default="all_reduce",
        help=f"comma-separated, from {', '.join(COLLECTIVE_OPS)} (default: all_reduce)",
    )
    sw.add_argument("--dtype", choices=DTYPE_NAMES, help="default: the profile's, else float32")
    sw.add_argument("-w", "--warmup_iters", type=int, help="warm-up calls per size (default: the profile's, 5)")
    sw.add_argument("-n", "--iters", type=int, help="timed calls per size (default: the profile's, 20)")
    sw.add_argument(
        "--timing",
        choices=sweep.TIMINGS,
        help="how the calls are timed (default: the profile's, auto: NCCL called directly on GPUs, as nccl-tests)",
    )
    sw.add_argument("--nproc-per-node", type=int, help="ranks per node (default: the profile's, else every GPU or 2)")
    sw.add_argument("--profile", help="profile for topology, env and timeouts (default: this machine as found)")
    sw.add_argument("--timeout", type=positive_seconds, help="seconds for the whole sweep (default: the profile's)")
    # --evidence, as `run`, bench_train and pytest's --cluster-evidence; --out is kept as a hidden old spelling
    sw.add_argument("--evidence", type=Path, help="evidence folder (default: a new folder under ./acceptance-results/)")
    sw.add_argument("--out", dest="evidence", type=Path, help=argparse.SUPPRESS)
    sw.set_defaults(func=cmd_sweep)


def cmd_list(args: argparse.Namespace) -> int:
    rows = []
    for name, path in profiles.available().items():
        try:
            about = profiles.describe(profiles.load(str(path)))
        except profiles.ProfileError as exc:
            about = f"INVALID: {str(exc).splitlines()[-1].strip()}"
        rows.append((name, about, f"[{path}]"))
    if rows:
        print(columns(rows, "lll", width=None if args.wide else TERMINAL_COLUMNS))
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    import pytest

    if not args.profile:
        raise CliError("name the profile: --profile NAME (or set CLUSTER_PROFILE); see `cluster-acceptance list`")
    extra = (["--cluster-tier", args.tier] if args.tier else []) + args.pytest_args
    return int(pytest.main(container.suite_args(container.suite_dir(), args.profile, args.evidence, extra)))


def cmd_show(args: argparse.Namespace) -> int:
    prof = profiles.load(args.name, args.set, args.tier)
    if args.get:
        print(_lookup(prof.resolved, args.get))
        return 0
    chain = " <- ".join(str(p) for p in prof.chain)
    print(f"# profile {prof.name}: {chain}\n# sha256 {prof.sha256}")
    print(yaml.safe_dump(prof.resolved, sort_keys=False, default_flow_style=False, width=120), end="")
    return 0


def _lookup(resolved: JSONObject, path: str) -> JSONValue:
    value: JSONValue = resolved
    parts, i = path.split("."), 0
    while i < len(parts):
        section = value if isinstance(value, dict) else {}
        # the longest key that matches: a metric name holds dots (thresholds.compute.copy_gbps_min.min)
        j = next((j for j in range(len(parts), i, -1) if ".".join(parts[i:j]) in section), 0)
        if not j:
            known = ", ".join(section) if isinstance(value, dict) else "none (not a section)"
            where = ".".join(parts[:i]) or "the profile"
            raise CliError(f"--get {path}: {where} has no key {parts[i]!r}; its keys: {known}")
        value, i = section[".".join(parts[i:j])], j
    return json.dumps(value) if isinstance(value, (dict, list)) else value


def cmd_junit(args: argparse.Namespace) -> int:
    if args.output:
        check_outputs([("-o", args.output)], [args.evidence])
    text = junit_xml(read_evidence(args.evidence))
    if args.output:
        write_atomic(args.output, text)
        print(f"wrote {args.output}")
    else:
        print(text)
    return 0


def cmd_merge(args: argparse.Namespace) -> int:
    # an output that is one of the inputs would replace a node's only evidence with the merge
    outputs = [("-o", args.output)] + ([("--junit", args.junit)] if args.junit else [])
    check_outputs(outputs, args.evidence)
    documents = [read_evidence(path) for path in args.evidence]
    merged = merge(documents)
    for note in merge_notes(documents):
        print(f"merged {note}")
    write_atomic(args.output, json.dumps(as_data(merged), indent=1, default=str))
    print(f"wrote {args.output}: {merged.verdict}")
    if args.junit:
        write_atomic(args.junit, junit_xml(merged))
        print(f"wrote {args.junit}")
    return 0 if merged.verdict == "PASS" else 1


def cmd_sweep(args: argparse.Namespace) -> int:
    ops = [op.strip() for op in args.ops.split(",") if op.strip()]
    if not ops:  # an empty list would sweep nothing, and end with no line at all
        raise CliError(
            f"--ops {args.ops!r}: names no operation; expected comma-separated, from {', '.join(COLLECTIVE_OPS)}"
        )
    options = sweep.SweepArgs(
        begin=args.minbytes,
        end=args.maxbytes,
        factor=args.stepfactor,
        ops=ops,
        dtype=args.dtype,
        warmup=args.warmup_iters,
        iters=args.iters,
        timing=args.timing,
        nproc_per_node=args.nproc_per_node,
        profile=args.profile,
        out=args.evidence,
        timeout=args.timeout,
    )
    return sweep.run(options, sys.stdout)


if __name__ == "__main__":
    sys.exit(main())
