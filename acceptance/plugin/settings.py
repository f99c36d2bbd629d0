"""The run's settings, resolved once when pytest configures the plugin, each with where it came from.

One precedence for every setting: the command line (``--cluster-tier``) > the environment
(``CLUSTER_TIER``) > the ini file (``cluster_tier``) > the profile (``tier:``) > the default. Each value
keeps its :class:`Origin`, as pytest-timeout's timeout keeps whether the option, the ini key or a marker
set it, so the header can say why a run took the tier it took. Below ``pytest_configure`` nothing reads
pytest's config for a setting again: the session, the tier selection, the placement, the baseline and the
evidence folder take theirs from :class:`RunSettings`.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, Literal, TypeVar, cast

import pytest

from acceptance.plugin import options
from acceptance.plugin.options import Option
from acceptance.profile import loader as profiles
from acceptance.profile.tiers import DEFAULT_TIER, Tier, tier_named

T = TypeVar("T")
OriginKind = Literal["option", "environment", "ini", "profile", "default"]
RUN_ID = "CLUSTER_RUN_ID"  # the scheduler's job id (the container entry sets it): the run's tag


@dataclass(frozen=True)
class Origin:
    """Where a setting's value came from: the kind of source and its name there (the flag, the variable,
    the ini key, the profile's key)."""

    kind: OriginKind
    name: str = ""

    def __str__(self) -> str:
        if self.kind == "option":
            return self.name
        if self.kind == "environment":
            return f"environment variable {self.name}"
        if self.kind == "ini":
            return f"ini key {self.name}"
        if self.kind == "profile":
            return f"profile key {self.name}" if self.name else "profile"
        return "default"

    @property
    def given(self) -> bool:
        """Whether the run was given the value (by option, environment or ini), not left to fall through."""
        return self.kind in ("option", "environment", "ini")


DEFAULT = Origin("default")


@dataclass(frozen=True)
class Setting(Generic[T]):
    value: T
    origin: Origin


@dataclass(frozen=True)
class Sources:
    """The places a setting may be given, highest first: the command line (as pytest parsed and converted
    it: None or [] when not given), the environment, the ini file (as pytest read it: '' or [] when unset)."""

    command_line: Mapping[str, object]
    environ: Mapping[str, str]
    ini: Mapping[str, object]

    @classmethod
    def of(cls, config: pytest.Config, environ: Mapping[str, str] = os.environ) -> Sources:
        given = {o.dest: config.getoption(o.dest) for o in options.OPTIONS}
        return cls(given, environ, {o.ini: config.getini(o.ini) for o in options.OPTIONS})

    def given(self, option: Option[T]) -> Setting[T] | None:
        """The option's value from the first source that gives one, converted; None when none does. A bad
        value in the environment or the ini file is a usage error naming where it was (pytest's own parser
        already refused a bad one on the command line)."""
        if option.repeat:
            raise TypeError(f"{option.flag} is repeatable: read it with listed()")
        cli = self.command_line.get(option.dest)
        if cli is not None:
            # pytest's parser converted it with option.convert (its ``type=``): a T, which pytest types Any
            return Setting(cast(T, cli), Origin("option", option.flag))
        raw, origin = "", DEFAULT
        if option.env:
            raw, origin = self.environ.get(option.env, ""), Origin("environment", option.env)
        if not raw:  # an empty variable is unset: an unset shell variable passed through falls to the ini file
            raw, origin = str(self.ini.get(option.ini) or ""), Origin("ini", option.ini)
        if not raw:
            return None
        try:
            return Setting(option.convert(raw), origin)
        except argparse.ArgumentTypeError as exc:
            raise pytest.UsageError(f"{origin}: {exc}") from None

    def setting(self, option: Option[T], fallback: Setting[T]) -> Setting[T]:
        return self.given(option) or fallback

    def optional(self, option: Option[T]) -> Setting[T | None]:
        """The option's value, or None with the default as its origin (the profile or the environment of
        the scheduler decides later)."""
        found = self.given(option)
        return Setting(None, DEFAULT) if found is None else Setting(found.value, found.origin)

    def listed(self, option: Option[str]) -> Setting[tuple[str, ...]]:
        """A repeatable option: every value the command line gave, else the ini file's lines."""
        cli = self.command_line.get(option.dest)
        if isinstance(cli, list) and cli:
            return Setting(tuple(str(v) for v in cli), Origin("option", option.flag))
        lines = self.ini.get(option.ini)
        if isinstance(lines, list) and lines:
            return Setting(tuple(str(v) for v in lines), Origin("ini", option.ini))
        return Setting((), DEFAULT)


@dataclass(frozen=True)
class PytestModes:
    """What pytest itself was asked to do, read with the settings: ``--collect-only`` measures and writes
    nothing; ``--setup-plan``, ``--setup-only`` and ``--fixtures`` run no probe; ``-n`` (pytest-xdist's
    controller) would share the node's GPUs between workers."""

    collect_only: bool = False
    probes: bool = True
    xdist: bool = False

    @classmethod
    def of(cls, config: pytest.Config) -> PytestModes:
        o = config.option
        no_probe = o.setupplan or o.setuponly or o.showfixtures or o.show_fixtures_per_test
        workers = config.getoption("numprocesses", None) or 0
        xdist = workers not in (0, "0") and not hasattr(config, "workerinput")
        return cls(collect_only=bool(o.collectonly), probes=not no_probe, xdist=xdist)


@dataclass(frozen=True)
class RunSettings:
    """Every setting of one run, resolved, typed, each with its origin."""

    profile_name: Setting[str]
    profile: profiles.Profile  # loaded with the run's tier and --cluster-set options
    sets: Setting[tuple[str, ...]]
    tier: Setting[Tier]
    drain: Setting[str]
    worker: Setting[bool]
    timeout: Setting[float | None]  # None: the profile's timeouts
    baseline: Setting[Path | None]
    evidence: Setting[Path | None]  # None: a new folder (evidence.folder.default_folder)
    nodes: Setting[int | None]  # None: what the scheduler's environment or the profile says
    node_rank: Setting[int | None]
    head: Setting[str | None]
    run_tag: Setting[str]
    modes: PytestModes = PytestModes()

    @classmethod
    def read(cls, config: pytest.Config) -> RunSettings | None:
        """The run's settings from pytest's config and the environment; None without a profile (the plugin
        stays inert, and leaves another project's environment alone)."""
        sources = Sources.of(config)
        if sources.given(options.PROFILE) is None:
            return None
        return cls.resolve(sources, PytestModes.of(config))

    @classmethod
    def resolve(cls, sources: Sources, modes: PytestModes = PytestModes()) -> RunSettings:
        """Every setting by the one precedence; the profile is loaded with the run's tier and ``--cluster-set``
        options, and then fills what none of them gave. A bad value or profile is a usage error."""
        if modes.xdist:
            raise pytest.UsageError(
                "cluster tests own every GPU of the node: run them without -n (pytest-xdist); "
                "xdist is for the plugin's own tests"
            )
        name = sources.given(options.PROFILE)
        if name is None:
            raise pytest.UsageError(f"no cluster profile: pass {options.PROFILE.flag} NAME")
        # every given value is converted before the profile loads: a bad one is one line, nothing loaded
        sets, tier = sources.listed(options.SET), sources.given(options.TIER)
        drain = sources.setting(options.DRAIN, Setting("off", DEFAULT))
        worker = sources.setting(options.WORKER, Setting(True, DEFAULT))
        baseline, evidence = sources.optional(options.BASELINE), sources.optional(options.EVIDENCE)
        nodes, node_rank = sources.optional(options.NODES), sources.optional(options.NODE_RANK)
        head, given_timeout = sources.optional(options.HEAD), sources.given(options.TIMEOUT)
        try:
            # the tier's settings (the profile's ``tiers:``) come before the --cluster-set options
            profile = profiles.load(name.value, list(sets.value), tier.value if tier else None)
        except profiles.ProfileError as exc:
            raise pytest.UsageError(str(exc)) from None
        timeout: Setting[float | None] = (
            Setting(given_timeout.value, given_timeout.origin)
            if given_timeout
            else Setting(None, Origin("profile", "timeouts"))
        )
        run_id = sources.environ.get(RUN_ID, "")
        return cls(
            profile_name=name,
            profile=profile,
            sets=sets,
            tier=_tier(tier, profile, sets),
            drain=drain,
            worker=worker,
            timeout=timeout,
            baseline=baseline,
            evidence=evidence,
            nodes=nodes,
            node_rank=node_rank,
            head=head,
            run_tag=Setting(run_id, Origin("environment", RUN_ID) if run_id else DEFAULT),
            modes=modes,
        )

    @property
    def placement_origin(self) -> str:
        """What the placement names as its source when the run moved a field of it: "command line" for the
        options, else where each given field came from (an ini key, say)."""
        given = [s.origin for s in (self.nodes, self.node_rank, self.head) if s.origin.given]
        if all(o.kind == "option" for o in given):
            return "command line"
        return ", ".join(str(o) for o in given)

    def line(self) -> str:
        """One header line: the settings that shape the run, each with its origin; the rest where given."""
        parts = [
            f"tier {self.tier.value.name} ({self.tier.origin})",
            f"drain {self.drain.value} ({self.drain.origin})",
            f"worker {'on' if self.worker.value else 'off'} ({self.worker.origin})",
        ]
        if self.timeout.value is not None:
            parts.append(f"timeout {self.timeout.value:g} s ({self.timeout.origin})")
        if self.baseline.value is not None:
            parts.append(f"baseline {self.baseline.value} ({self.baseline.origin})")
        if self.sets.value:  # the keys only: a value may be a secret (``env.HF_TOKEN=...``)
            keys = ", ".join(item.partition("=")[0].strip() for item in self.sets.value)
            parts.append(f"set {keys} ({self.sets.origin})")
        return "cluster settings: " + ", ".join(parts)


def _tier(given: Setting[str] | None, profile: profiles.Profile, sets: Setting[tuple[str, ...]]) -> Setting[Tier]:
    """The run's tier: the option's, else the profile's ``tier:`` (which ``--cluster-set tier=...`` may
    have set), else the default."""
    if given is not None:
        return Setting(tier_named(given.value), given.origin)
    model = profile.model
    if any(item.partition("=")[0].strip() == "tier" for item in sets.value):
        origin = Origin("option", f"{options.SET.flag} tier") if sets.origin.kind == "option" else sets.origin
    elif "tier" in model.model_fields_set:
        origin = Origin("profile", "tier")
    else:
        return Setting(tier_named(DEFAULT_TIER), DEFAULT)
    return Setting(tier_named(model.tier), origin)
