"""Every option of the plugin, defined once: the pytest options, their ini keys and environment
variables, and the argparse options the commands share. One precedence everywhere:
command line > environment > ini file > profile (an option left unset falls through to the profile).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
    value = non_negative_int(text)
    if value == 0:
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


@dataclass(frozen=True)
class Option:
    name: str  # without the leading dashes: cluster-profile
    help: str
    env: str | None = None
    convert: Callable[[str], Any] = str
    repeat: bool = False  # may be given several times (a list)
    metavar: str | None = None

    @property
    def dest(self) -> str:
        return self.name.replace("-", "_")

    @property
    def ini(self) -> str:
        return self.dest


OPTIONS: tuple[Option, ...] = (
    Option("cluster-profile", "profile name or YAML path (none: the plugin stays inert)", env="CLUSTER_PROFILE"),
    Option(
        "cluster-evidence",
        "evidence folder; must not hold another run's evidence (default: a new folder under "
        "./acceptance-results/ named by time, profile, host, node and run id)",
        env="CLUSTER_EVIDENCE",
        convert=folder_path,
    ),
    Option(
        "cluster-set",
        "override one profile key for this run, e.g. training.micro_batch=8 (repeatable; validated like the file)",
        repeat=True,
        metavar="KEY.PATH=VALUE",
    ),
    Option(
        "cluster-baseline",
        "an earlier run's evidence (the handover): a gated figure worse than it beyond the profile's "
        "baseline tolerance (default 5%) fails, as `cluster-acceptance compare` judges",
        env="CLUSTER_BASELINE",
        convert=Path,
    ),
    Option("cluster-timeout", "seconds per probe run, overriding the profile's timeouts", convert=positive_seconds),
    Option(
        "cluster-nodes", "number of nodes (default: Slurm, Kubernetes, NNODES, or the profile)", convert=positive_int
    ),
    Option(
        "cluster-node-rank",
        "this node's rank (default: SLURM_NODEID, JOB_COMPLETION_INDEX, NODE_RANK, or 0)",
        convert=non_negative_int,
    ),
    Option(
        "cluster-head",
        "rendezvous head HOST[:PORT] (default: first Slurm node, CLUSTER_HEAD, MASTER_ADDR, or 127.0.0.1; "
        "port: MASTER_PORT or the profile's rdzv_port)",
    ),
    Option(
        "cluster-worker",
        "on (default): one torchrun job per node runs the full-world probes one after another; off: every "
        "probe a torchrun job of its own, as a fresh process (slower; to rule the worker out)",
        env="CLUSTER_WORKER",
        convert=on_off,
        metavar="on|off",
    ),
    Option(
        "cluster-tier",
        "quick (a job prolog, an init container: seconds), standard (the whole suite) or burn-in (standard "
        "plus the soak); default: the profile's tier, else standard",
        env="CLUSTER_TIER",
        convert=tier_name,
        metavar="|".join(tiers.TIER_NAMES),
    ),
    Option(
        "cluster-drain",
        "off (default): a run that does not PASS only writes drain.json in its evidence; slurm: also drains "
        "its nodes (scontrol update state=drain reason=...); kubernetes: also taints and labels them (kubectl)",
        env="CLUSTER_DRAIN",
        convert=drain_way,
        metavar="|".join(DRAIN_WAYS),
    ),
)
BY_DEST = {o.dest: o for o in OPTIONS}


def add_to_pytest(parser: pytest.Parser) -> None:
    group = parser.getgroup("cluster", "cluster acceptance")
    for option in OPTIONS:
        where = f" [env {option.env}, ini {option.ini}]" if option.env else f" [ini {option.ini}]"
        kwargs: dict[str, Any] = {"dest": option.dest, "help": option.help + where, "metavar": option.metavar}
        if option.repeat:
            group.addoption(f"--{option.name}", action="append", default=[], **kwargs)
        else:
            convert: Any = option.convert
            group.addoption(f"--{option.name}", type=convert, default=None, **kwargs)
        if option.repeat:
            parser.addini(option.ini, option.help, type="linelist")
        else:
            parser.addini(option.ini, option.help, type="string")


def value(config: pytest.Config, dest: str, environ: Mapping[str, str] = os.environ) -> Any:
    """The option's value by the one precedence: command line > environment > ini > None (the profile)."""
    option = BY_DEST[dest]
    given = config.getoption(dest)
    if given not in (None, []):
        return given
    raw = environ.get(option.env) if option.env else None
    source = f"environment variable {option.env}"
    if not raw:
        raw, source = config.getini(option.ini), f"ini key {option.ini}"
    if option.repeat:
        return list(raw or [])
    if raw in (None, ""):
        return None
    try:
        return option.convert(str(raw))
    except argparse.ArgumentTypeError as exc:
        raise pytest.UsageError(f"{source}: {exc}") from None


def run_settings(config: pytest.Config) -> dict[str, Any]:
    """What the options set on the session's ClusterRun (besides the profile, placement and folder)."""
    return {
        "timeout_override": value(config, "cluster_timeout"),
        "run_tag": os.environ.get("CLUSTER_RUN_ID", ""),
        "persist": not config.option.collectonly,
        "worker": value(config, "cluster_worker") is not False,
    }


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
