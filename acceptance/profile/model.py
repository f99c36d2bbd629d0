"""The profile schema: the sections every profile has, and one section per family from the registry.

Strict on purpose (``fields.Strict``): a typo in a profile must never turn a gate off.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from pydantic import AfterValidator, Field, JsonValue, create_model

from acceptance.profile.registry import FAMILIES
from acceptance.profile.tiers import DEFAULT_TIER, TierName
from acceptance.schema.bounds import Threshold
from acceptance.schema.fields import ProfileName, Seconds, Strict, Tolerance
from acceptance.schema.topology import Topology


class TimeoutsBase(Strict):
    """Wall-clock limit per probe run, in seconds (start-up included); one field per family besides these
    (``timeouts.<family>``: its probes' runs; training's: each strategy's run, and the scaling baseline's)."""

    default: Seconds = 300
    rendezvous: Seconds = 300  # multi-node: how long the nodes wait for each other at the start and before a probe

    def key_for(self, probe: str) -> str:
        """The key that holds ``probe``'s limit: its family's (``timeouts.internode`` covers the isolation
        rounds too) where set, else ``default``."""
        family = next((f.name for f in FAMILIES if probe in f.probes), probe)
        return family if getattr(self, family, None) is not None else "default"

    def for_probe(self, probe: str) -> float:
        """The limit of the family that runs ``probe``, else ``default``."""
        return float(getattr(self, self.key_for(probe)))


if TYPE_CHECKING:
    Timeouts = TimeoutsBase
else:
    Timeouts = create_model(
        "Timeouts",
        __base__=TimeoutsBase,
        __module__=__name__,
        **{family.name: (Seconds | None, None) for family in FAMILIES},
    )


class Cost(Strict):
    """What one GPU-hour costs, so training figures read as tokens per dollar beside tokens per second."""

    usd_per_gpu_hour: Annotated[float, Field(gt=0)]
    source: str | None = None  # the price list or contract it comes from


class Baseline(Strict):
    """How much worse than a baseline run a gated figure may get (``compare``, ``--cluster-baseline``)."""

    # relative (0.05 = 5% worse than the baseline), or in points for a fraction of the median (5 points)
    tolerance: Tolerance = 0.05
    tolerances: dict[str, Tolerance] = {}  # per metric name, replacing the default


# an environment variable's name as the process environment takes it: not empty, no '=' (it ends the name in
# the environment block) and no NUL; os.environ refuses those with a traceback, after the run started
def _env_name(name: str) -> str:
    if not name or "=" in name or "\x00" in name:
        raise ValueError("not an environment variable's name: it must be non-empty, without '=' or NUL")
    return name


EnvName = Annotated[str, AfterValidator(_env_name)]


class ProfileBase(Strict):
    """The sections every profile has; the families' sections come from the registry (``ProfileModel``), each
    read with its family's ``Family.section_of``."""

    name: ProfileName
    description: str = ""
    extends: str | None = None
    # the tier a run takes without --cluster-tier (acceptance.profile.tiers): a prolog's profile says quick
    tier: TierName = DEFAULT_TIER
    # settings per tier, KEY.PATH -> value as --cluster-set takes them, applied when that tier runs
    # (profile/loader.py): the standard tier's shorter checkpoint and training, the burn-in's full ones
    tiers: dict[TierName, dict[str, JsonValue]] = {}
    topology: Topology = Topology(device="cpu", backend="gloo", ranks_per_node=2)
    env: dict[EnvName, str] = {}
    # words that make a variable's, an option's or a key's name a credential, beside the ones every run
    # masks (acceptance.masking.SECRET_WORDS): a site's own, e.g. LICENCE
    secret_names: list[str] = []
    timeouts: Timeouts = Timeouts()
    thresholds: dict[str, Threshold] = {}
    cost: Cost | None = None
    baseline: Baseline = Baseline()


if TYPE_CHECKING:
    # for the type checker the model is its base: the families' sections are built from the list of families,
    # which a type checker cannot follow; a caller reads one with its family's ``Family.section_of(model)``
    ProfileModel = ProfileBase
else:
    ProfileModel = create_model(
        "ProfileModel",
        __base__=ProfileBase,
        __module__=__name__,
        **{family.name: (family.section, family.section()) for family in FAMILIES},
    )
