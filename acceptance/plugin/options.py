"""Every option of the plugin, defined once: the pytest options, their ini keys and environment
variables, and the argparse options the commands share. One precedence everywhere:
command line > environment > ini file > profile > default, resolved once per run by
``acceptance.plugin.settings``.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import pytest

from acceptance.profile import tiers
from acceptance.profile.arguments import positive_seconds


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return value


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:  # -3 and 0 alike: one bound, said one way
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


def folder_path(text: str) -> Path:
    """A folder the run writes into. An empty one would be ``Path("")``, the current folder: refused, so an
    unset shell variable (``--cluster-evidence "$DIR"``) never writes the evidence into the checkout."""
    if not text.strip():
        raise argparse.ArgumentTypeError("expected a folder path, got an empty value")
    return Path(text)


def tier_name(text: str) -> str:
    try:
        return tiers.tier_named(text.strip()).name
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


DRAIN_WAYS = ("off", "slurm", "kubernetes")


def drain_way(text: str) -> str:
    word = text.strip().lower()
    if word not in DRAIN_WAYS:
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(DRAIN_WAYS)}, got {text!r}")
    return word


def on_off(text: str) -> bool:
    word = text.strip().lower()
    if word in ("on", "off"):
        return word == "on"
    raise argparse.ArgumentTypeError(f"expected on or off, got {text!r}")


T = TypeVar("T")


@dataclass(frozen=True)
class Option(Generic[T]):
    """One option: its flag, its ini key, its environment variable, and how a text becomes its value (the
    same conversion for all three, so a bad value reads the same wherever it was given)."""

    name: str  # without the leading dashes: cluster-profile
    help: str
    convert: Callable[[str], T]
    env: str | None = None
    repeat: bool = False  # may be given several times (a list)
    metavar: str | None = None

    @property
    def dest(self) -> str:
        return self.name.replace("-", "_")

    @property
    def flag(self) -> str:
        return f"--{self.name}"

    @property
    def ini(self) -> str:
        return self.dest


PROFILE = Option(
    "cluster-profile", "profile name or YAML path (none: the plugin stays inert)", str, env="CLUSTER_PROFILE"
)
EVIDENCE = Option(
    "cluster-evidence",
    "evidence folder; must not hold another run's evidence (default: a new folder under "
    "./acceptance-results/ named by time, profile, host, node and run id)",
    folder_path,
    env="CLUSTER_EVIDENCE",
)
SET = Option(
    "cluster-set",
    "override one profile key for this run, e.g. training.micro_batch=8 (repeatable; validated like the file)",
    str,
    repeat=True,
    metavar="KEY.PATH=VALUE",
)
BASELINE = Option(
    "cluster-baseline",
    "an earlier run's evidence (the handover): a gated figure worse than it beyond the profile's "
    "baseline tolerance (default 5%) fails, as `cluster-acceptance compare` judges",
    Path,
    env="CLUSTER_BASELINE",
)
TIMEOUT = Option("cluster-timeout", "seconds per probe run, overriding the profile's timeouts", positive_seconds)
NODES = Option("cluster-nodes", "number of nodes (default: Slurm, Kubernetes, NNODES, or the profile)", positive_int)
NODE_RANK = Option(
    "cluster-node-rank",
    "this node's rank (default: SLURM_NODEID, JOB_COMPLETION_INDEX, NODE_RANK, or 0)",
    non_negative_int,
)
HEAD = Option(
    "cluster-head",
    "rendezvous head HOST[:PORT] (default: first Slurm node, CLUSTER_HEAD, MASTER_ADDR, or 127.0.0.1; "
    "port: MASTER_PORT or the profile's rdzv_port)",
    str,
)
WORKER = Option(
    "cluster-worker",
    "on (default): one torchrun job per node runs the full-world probes one after another; off: every "
    "probe a torchrun job of its own, as a fresh process (slower; to rule the worker out)",
    on_off,
    env="CLUSTER_WORKER",
    metavar="on|off",
)
TIER = Option(
    "cluster-tier",
    "quick (a job prolog, an init container: seconds), standard (the whole suite) or burn-in (standard "
    "plus the soak); default: the profile's tier, else standard",
    tier_name,
    env="CLUSTER_TIER",
    metavar="|".join(tiers.TIER_NAMES),
)
DRAIN = Option(
    "cluster-drain",
    "off (default): a run that does not PASS only writes drain.json in its evidence; slurm: also drains "
    "its nodes (scontrol update state=drain reason=...); kubernetes: also taints and labels them (kubectl)",
    drain_way,
    env="CLUSTER_DRAIN",
    metavar="|".join(DRAIN_WAYS),
)
OPTIONS: tuple[Option[Any], ...] = (
    PROFILE,
    EVIDENCE,
    SET,
    BASELINE,
    TIMEOUT,
    NODES,
    NODE_RANK,
    HEAD,
    WORKER,
    TIER,
    DRAIN,
)
BY_DEST = {o.dest: o for o in OPTIONS}


def add_to_pytest(parser: pytest.Parser) -> None:
    group = parser.getgroup("cluster", "cluster acceptance")
    for option in OPTIONS:
        where = f" [env {option.env}, ini {option.ini}]" if option.env else f" [ini {option.ini}]"
        kwargs: dict[str, Any] = {"dest": option.dest, "help": option.help + where, "metavar": option.metavar}
        if option.repeat:
            group.addoption(option.flag, action="append", default=[], **kwargs)
        else:
            convert: Any = option.convert
            group.addoption(option.flag, type=convert, default=None, **kwargs)
        if option.repeat:
            parser.addini(option.ini, option.help, type="linelist")
        else:
            parser.addini(option.ini, option.help, type="string")


def add_to_argparse(parser: argparse.ArgumentParser, *dests: str, prefix: str = "--cluster-") -> None:
    """The same options for a command (``cluster-acceptance sweep``, bench_train): same names less the
    prefix where a command spells them shorter, same conversion and help."""
    for dest in dests:
        option = BY_DEST[dest]
        flag = "--" + option.name.removeprefix("cluster-") if prefix != "--cluster-" else f"--{option.name}"
        if option.repeat:
            parser.add_argument(flag, dest=dest, action="append", default=[], help=option.help, metavar=option.metavar)
        else:
            default = os.environ.get(option.env) if option.env else None
            parser.add_argument(flag, dest=dest, type=option.convert, default=default, help=option.help)
