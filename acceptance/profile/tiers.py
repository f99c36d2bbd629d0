"""The tiers of a run: which families it selects and how long it may take, for each moment a cluster is checked.

Operators check a node at several moments: before every job (a Slurm prolog, a Kubernetes init container:
seconds), at handover and after a repair (minutes), and in a burn-in (hours). DCGM's diagnostic levels are
the same idea (``dcgmi diag -r 1|2|3|4``: seconds, about 2 minutes, about 15 minutes, 1 to 2 hours; NVIDIA
DCGM user guide, "Run Levels"). A tier here is a selection derived from the family registry, nested:

- quick: the families marked ``Family.quick`` (preflight, inventory and health gates, drift, an all_reduce and
  a p2p at one size, a few seconds of matmul);
- standard: every family that is not ``Family.opt_in`` (today's suite);
- burn-in: every family, the opt-in ones (the reference workload, the soak) included.

``--cluster-tier`` picks one (else the profile's ``tier:``, else standard); ``-m`` and ``-k`` narrow it further.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from acceptance.profile.registry import FAMILIES
from acceptance.schema.family import Device, Family

TierName = Literal["quick", "standard", "burn-in"]
TIER_NAMES: tuple[TierName, ...] = ("quick", "standard", "burn-in")
DEFAULT_TIER: TierName = "standard"


@dataclass(frozen=True)
class Tier:
    name: TierName
    moment: str  # when an operator runs it, as the docs' tiers table says it (``docs/hooks.py``)
    # the wall a run of the tier must stay within, per ``topology.device``, per node; None: no budget of its
    # own (burn-in: the standard suite's plus the soak's duration, which the profile sets)
    budget_s: Mapping[Device, float | None]
    budget_source: str  # the budget in words, each figure of ``budget_s`` with where it holds

    def has(self, family: Family[Any]) -> bool:
        """Whether the tier runs the family's tests."""
        if self.name == "quick":
            return family.quick
        if self.name == "standard":
            return not family.opt_in
        return True

    @property
    def families(self) -> tuple[Family[Any], ...]:
        return tuple(f for f in FAMILIES if self.has(f))

    @property
    def modules(self) -> frozenset[str]:
        return frozenset(f.module for f in self.families)

    def budget(self, device: Device) -> float | None:
        return self.budget_s.get(device)


TIERS: Mapping[TierName, Tier] = {
    "quick": Tier(
        "quick",
        "before every job: a Slurm prolog or epilog, `HealthCheckProgram`, a Kubernetes init container or CronJob",
        {"cpu": 15.0, "cuda": 30.0},
        "15 s on local-cpu; 30 s warm on one H100 and on 2x H200: a job's prolog must not hold the job up",
    ),
    "standard": Tier(
        "standard",
        "at handover, after a repair: the whole suite",
        {"cpu": None, "cuda": 120.0},
        "120 s on 2x H200 cold, storage included; none of its own on the CPU",
    ),
    "burn-in": Tier(
        "burn-in",
        "new or repaired nodes, for hours",
        {"cpu": None, "cuda": None},
        "the standard suite's, plus the reference workload and the soak's duration (the profile's `soak.duration_s`)",
    ),
}


def tier_named(name: str) -> Tier:
    """The tier called ``name``; a ValueError naming the choices otherwise."""
    if name not in TIERS:
        raise ValueError(f"expected one of {', '.join(TIER_NAMES)}, got {name!r}")
    return TIERS[name]  # type: ignore[index]


def first_tier(family: Family[Any]) -> TierName:
    """The smallest tier that runs the family (the tiers nest): what the reference tables show."""
    return next(t for t in TIER_NAMES if TIERS[t].has(family))
