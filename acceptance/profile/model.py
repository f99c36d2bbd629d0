"""The profile schema: the sections every profile has, and one section per family from the registry.

Strict on purpose (``fields.Strict``): a typo in a profile must never turn a gate off.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import AfterValidator, Field, JsonValue, create_model, model_validator

from acceptance.profile.fields import PositiveInt as PositiveInt  # re-exported: the sections' field types
from acceptance.profile.fields import ProfileName, Seconds, Strict, Tolerance
from acceptance.profile.fields import RunName as RunName
from acceptance.profile.fields import Size as Size
from acceptance.profile.registry import FAMILIES
from acceptance.profile.sections import TRAIN_STRATEGIES as TRAIN_STRATEGIES
from acceptance.profile.sections import Collectives as Collectives  # re-exported: the families' sections
from acceptance.profile.sections import Compute as Compute
from acceptance.profile.sections import Connectivity as Connectivity
from acceptance.profile.sections import DeepSpeedRun as DeepSpeedRun
from acceptance.profile.sections import Health as Health
from acceptance.profile.sections import Internode as Internode
from acceptance.profile.sections import Storage as Storage
from acceptance.profile.sections import StoragePath as StoragePath
from acceptance.profile.sections import Training as Training
from acceptance.profile.tiers import DEFAULT_TIER, TierName


class Topology(Strict):
    nodes: PositiveInt = 1
    ranks_per_node: PositiveInt | None = None  # processes per node; default: gpus_per_node on cuda, 2 on cpu
    gpus_per_node: Annotated[int, Field(ge=0)] = 0
    gpu_model: str | None = None
    device: Literal["cuda", "cpu"] = "cuda"
    backend: Literal["nccl", "gloo"] = "nccl"
    launcher: Literal["torchrun", "srun"] = "torchrun"
    rdzv_port: Annotated[int, Field(gt=0, lt=65535)] = 29400  # multi-node: the nodes' store uses rdzv_port + 1
    srun_args: list[str] = []  # launcher srun: extra srun options, e.g. --gpus-per-node=8 or --container-image=...

    @model_validator(mode="after")
    def _consistent(self) -> Topology:
        if self.device == "cpu" and self.backend != "gloo":
            raise ValueError("device cpu needs backend gloo (NCCL runs on GPUs only)")
        if self.device == "cuda" and self.gpus_per_node < 1:
            raise ValueError("device cuda needs gpus_per_node >= 1")
        return self

    @property
    def nproc_per_node(self) -> int:
        if self.ranks_per_node is not None:
            return self.ranks_per_node
        return self.gpus_per_node if self.device == "cuda" else 2


class TimeoutsBase(Strict):
    """Wall-clock limit per probe run, in seconds (start-up included); one field per family besides these
    (``timeouts.<family>``: its probes' runs; training's: each strategy's run, and the scaling baseline's)."""

    default: Seconds = 300
    rendezvous: Seconds = 300  # multi-node: how long the nodes wait for each other at the start and before a probe

    def for_probe(self, probe: str) -> float:
        """The limit of the family that runs ``probe`` (``timeouts.internode`` covers the isolation rounds
        too), else ``default``."""
        family = next((f.name for f in FAMILIES if probe in f.probes), probe)
        value = getattr(self, family, None)
        return float(value if value is not None else self.default)


if TYPE_CHECKING:
    Timeouts = TimeoutsBase
else:
    Timeouts = create_model(
        "Timeouts",
        __base__=TimeoutsBase,
        __module__=__name__,
        **{family.name: (Seconds | None, None) for family in FAMILIES},
    )


class Threshold(Strict):
    min: float | None = None
    max: float | None = None
    eq: float | None = None
    ref: float | None = None
    tol: Annotated[float, Field(ge=0)] | None = None  # relative, both sides of ref: 0.05 = 5%
    # ReFrame's reference shape: relative bounds on each side of ref, lower <= 0 <= upper; one may be left out
    lower: Annotated[float, Field(ge=-1, le=0)] | None = None
    upper: Annotated[float, Field(ge=0)] | None = None
    xfail: str | None = None
    source: str | None = None  # where the bound comes from

    @model_validator(mode="after")
    def _one_kind(self) -> Threshold:
        if self.min is None and self.max is None and self.eq is None and self.ref is None:
            raise ValueError("a threshold needs at least one of min, max, eq, ref")
        relative = [k for k in ("tol", "lower", "upper") if getattr(self, k) is not None]
        if (self.ref is None) != (not relative):
            raise ValueError(
                "ref and tol go together (tol is relative: 0.05 = 5%), or ref with lower and/or upper "
                "(relative bounds below and above ref, ReFrame-style: lower -0.1 = 10% under ref)"
            )
        if self.tol is not None and len(relative) > 1:
            raise ValueError("tol is both sides of ref at once: give tol, or lower and/or upper, not both")
        if self.eq is not None and (self.min is not None or self.max is not None):
            raise ValueError("eq cannot be combined with min or max")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min {self.min:g} is above max {self.max:g}: no value can meet both")
        return self


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
    """The sections every profile has; the families' sections come from the registry (``ProfileModel``)."""

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
    timeouts: Timeouts = Timeouts()
    thresholds: dict[str, Threshold] = {}
    cost: Cost | None = None
    baseline: Baseline = Baseline()


if TYPE_CHECKING:

    class ProfileModel(ProfileBase):
        """For the type checker only: the sections of the registry's families as the code reads them. A new
        family's code reads its own with ``Family.section_of``; the model below is built from the registry."""

        connectivity: Connectivity = Connectivity()
        health: Health = Health()
        storage: Storage = Storage()
        compute: Compute = Compute()
        collectives: Collectives = Collectives()
        internode: Internode = Internode()
        training: Training = Training()

else:
    ProfileModel = create_model(
        "ProfileModel",
        __base__=ProfileBase,
        __module__=__name__,
        **{family.name: (family.section, family.section()) for family in FAMILIES},
    )
