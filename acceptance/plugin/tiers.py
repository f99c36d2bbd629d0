"""The run's tier in the session: its tests outside the tier deselected, as pytest's ``-m`` deselects.

The tier is chosen once with the run's settings (``--cluster-tier`` > ``CLUSTER_TIER`` > ini
``cluster_tier`` > the profile's ``tier:`` > standard: ``acceptance.plugin.settings``) and applied after
``-m`` and ``-k``, so both narrow a tier further and neither widens it. The
tests a tier leaves out are no part of the run: a quick run of its families whole is a verdict (PASS or
FAIL), not PARTIAL; a quick run narrowed by ``-m`` is PARTIAL as any other.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest
from pydantic import JsonValue

from acceptance.evidence.model import TierRecord
from acceptance.profile.registry import family_of_module
from acceptance.profile.tiers import Tier
from acceptance.schema.family import Device, Family

REASON = "not in the {tier} tier ({origin})"


@dataclass
class Selection:
    """What the tier did to the collected tests: the node ids it left out, per family, and the opt-in
    families the run asked for by name beside the tier (``-m soak`` under the standard tier)."""

    tier: Tier
    settings: Mapping[str, JsonValue] = field(default_factory=dict)  # the profile's for the tier (tiers.NAME)
    origin: str = "--cluster-tier"  # where the tier was chosen (the option, the profile's key, the default)
    left_out: set[str] = field(default_factory=set)
    by_family: Counter[str] = field(default_factory=Counter)
    added: list[str] = field(default_factory=list)

    def apply(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        """Deselect the items of the families outside the tier (a test outside every family stays). An
        opt-in family's tests left here were asked for by name (``-m soak``: ``acceptance.plugin.opt_in``
        deselected them otherwise), and stay: the run is the tier plus that family."""
        dropped: list[pytest.Item] = []
        for item in items:
            family = family_of_module(item.path.stem)
            if family is None or self.tier.has(family):
                continue
            if family.opt_in:
                if family.name not in self.added:
                    self.added.append(family.name)
            else:
                dropped.append(item)
                self.by_family[family.name] += 1
        if dropped:
            self.left_out |= {item.nodeid for item in dropped}
            config.hook.pytest_deselected(items=dropped)
            items[:] = [item for item in items if item.nodeid not in self.left_out]

    def runs(self, family: Family[Any]) -> bool:
        """Whether the run holds ``family``: its tier's, or an opt-in family asked for by name."""
        return self.tier.has(family) or family.name in self.added

    def record(self, device: Device) -> TierRecord:
        """The tier in the evidence; no budget once a family outside it was added (the soak's own duration
        is then part of the wall)."""
        tier = self.tier
        families = [f.name for f in tier.families]
        budget = None if self.added else tier.budget(device)
        return TierRecord(
            name=tier.name,
            families=families,
            added=list(self.added),
            settings=dict(self.settings),
            deselected=dict(self.by_family),
            budget_s=budget,
        )

    def line(self) -> str:
        """One line for the terminal: the tier, its families, its settings, and what it deselected and why."""
        names = ", ".join(f.name for f in self.tier.families)
        text = f"cluster tier: {self.tier.name} ({names})"
        if self.added:
            text += f" + {', '.join(self.added)} (asked for by name: no tier budget)"
        if self.settings:
            text += "; its settings (profile tiers." + self.tier.name + "): "
            text += ", ".join(f"{key}={value}" for key, value in self.settings.items())
        if self.by_family:
            parts = ", ".join(f"{name} {count}" for name, count in self.by_family.items())
            why = REASON.format(tier=self.tier.name, origin=self.origin)
            text += f"; deselected {sum(self.by_family.values())} test(s), {why}: {parts}"
        return text
