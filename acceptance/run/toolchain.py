"""The compilers the run's probes build with, found before anything runs.

torch.compile, DeepSpeed's ops and the collectives' C loop each build code on the node at their first call,
each with the compiler its own project looks for. On a node image without one, every test they serve fails
deep inside a probe (DeepSpeed's op: "cannot open shared object file"), and a single-node run would blame the
node for it. The preflight looks for each compiler the selected tests need the way its project does, and says
what is missing and what needs it: the install's fault (review), before anything runs. The collectives' C
loop has a way of its own without one (the calls issued from Python, its figures labelled so): it is named
beside a need that stops a family, and fails nothing alone.
"""

from __future__ import annotations

import os
import shlex
import shutil
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from acceptance.profile.model import ProfileModel
from acceptance.profile.registry import FAMILIES
from acceptance.schema.toolchain import Need


@dataclass(frozen=True)
class Missing:
    need: Need
    setting: str  # the profile's setting that makes the run need it
    looked_for: str  # what was looked for, as a person would type it

    def line(self) -> str:
        return f"{self.need.builds.format(setting=self.setting)} with {self.looked_for}"


def needs(model: ProfileModel, families: Collection[str] | None = None) -> list[tuple[Need, str]]:
    """What the run builds with under ``model``, each with the profile setting that asks for it, those that stop
    a family first (``Behaviour.builds_with``); ``families``: the selected tests' (None: every family)."""
    found = [
        need
        for family in FAMILIES
        if family.behaviour.builds_with is not None and (families is None or family.name in families)
        for need in family.behaviour.builds_with(family.section_of(model), model.topology.device)
    ]
    return sorted(found, key=lambda need: not need[0].stops)


def compiler(need: Need, env: Mapping[str, str]) -> str | None:
    """The compiler ``need`` would use under ``env`` (its variable's command, else the first of its commands
    on PATH), or None."""
    path = env.get("PATH", os.defpath)
    named = shlex.split(env.get(need.variable, ""))
    candidates = named[:1] or list(need.commands)
    return next((found for c in candidates if (found := shutil.which(c, path=path))), None)


def _looked_for(need: Need, env: Mapping[str, str]) -> str:
    named = shlex.split(env.get(need.variable, ""))
    if named:
        return f"${need.variable} ({named[0]}, not on PATH)"
    return ", ".join([f"${need.variable}", *need.commands[:-1]]) + f" or {need.commands[-1]}"


def missing(model: ProfileModel, env: Mapping[str, str], families: Collection[str] | None = None) -> list[Missing]:
    """Each compiler the run needs and ``env`` lacks."""
    return [
        Missing(need, setting, _looked_for(need, env))
        for need, setting in needs(model, families)
        if compiler(need, env) is None
    ]


def problem(lacking: list[Missing]) -> tuple[str, tuple[str, ...]] | None:
    """The preflight's line for what is missing (each need, those with a way of their own too), and the
    families it stops; None when nothing stops a family (the collectives' loop alone issues its calls from
    Python, and its figures' label says why)."""
    stopped = tuple(dict.fromkeys(m.need.family for m in lacking if m.need.stops))
    if not stopped:
        return None
    return (
        "no C/C++ compiler on PATH: "
        + "; ".join(m.line() for m in lacking)
        + f": install one (e.g. gcc and g++ in the node image) or name it in CC/CXX; {', '.join(stopped)} skipped",
        stopped,
    )
