"""A family's descriptor and the shapes of its figures: the types each family module declares itself with.

A family (``collectives``, ``compute``, ...) has one name on every side: its module
(``acceptance/families/<name>.py``: its profile section, this descriptor, its rules), its probe
(``acceptance/probes/<name>.py``), its test module (``tests_cluster/test_<name>.py``), its pytest marker
(``-m <name>``), its profile section (``<name>:``), its timeout (``timeouts.<name>``) and its metric prefix
(``<name>.``). The descriptor says what differs: the section's model, the shapes of its figures with their
built-in bounds, where its probes may run and what they need, and what the shared code calls it for (its
``Behaviour``: its report section, init's part, its floors, ...). The list of families
(``acceptance.profile.registry``) sits above the family modules; everything that names families reads it.

The shape follows nccl-tests, where one collective is one small ``testColl`` struct that a shared loop
drives, and torchtitan's typed ``TrainSpec`` registry.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Literal, Protocol, TypeVar

from acceptance.json_types import JSONObject
from acceptance.schema.bounds import Threshold, must_be_zero
from acceptance.schema.fields import Strict
from acceptance.schema.floors import HardwareFloor, NodePaths
from acceptance.schema.initial import Initial
from acceptance.schema.noise import Noise
from acceptance.schema.report import ReportSection
from acceptance.schema.stored import StoredRun
from acceptance.schema.toolchain import Need

Better = Literal["higher", "lower", "none"]  # none: a count to match (world size), or a value with no good side
# How a change against a baseline run is measured (``compare``, ``--cluster-baseline``): relative to the old
# figure; in points, for a figure that is itself a fraction of another (0.004 -> 0.012 under the median is
# noise, not "200% worse"); or not at all, where the profile's bound alone judges the figure.
Scale = Literal["relative", "points", "bound"]
# What a bound on the figure means. correctness: the figure counts wrong things (elements, ranks, GPUs that
# disagree, a loss that rises); its bound is a sanity gate, kept apart from speed as ReFrame keeps sanity
# apart from performance references: no baseline loosens or tightens it. performance: a speed, a time or a
# spread, judged by its bound and against a baseline run.
Kind = Literal["performance", "correctness"]
# Where a figure can be measured at all (the profile's ``topology.device``): NVML, device memory, fp8 tensor
# cores and a GPU's peak exist on GPUs only; a bound on such a figure in a CPU profile could never hold.
Device = Literal["cuda", "cpu"]
ANY_DEVICE: tuple[Device, ...] = ("cuda", "cpu")
GPU_ONLY: tuple[Device, ...] = ("cuda",)

S = TypeVar("S", bound=Strict)


@dataclass(frozen=True)
class Metric(Generic[S]):
    """One shape of figure: a regular expression after the family's ``<name>.`` prefix whose named groups
    take a value of a list in the family's section (``domains``), e.g. ``(?P<op>\\w+)\\.busbw_gbps@(?P<size>\\w+)``
    with ``{"op": ops, "size": sizes}``; a threshold key outside those lists is a typo, never a gate off."""

    regex: str
    doc: str  # the shape in words, as the profile reference shows it
    better: Better
    floor: float | None = 0.0  # no figure of the shape is ever below it; None: not known
    scale: Scale = "relative"
    kind: Kind = "performance"
    domains: Mapping[str, Callable[[S], Sequence[str]]] = field(default_factory=dict)
    devices: tuple[Device, ...] = ANY_DEVICE  # the ``topology.device`` values whose runs measure the shape
    # the bound where the profile sets none, from the family's section: ``must_be_zero`` for a correctness
    # count, a sanity gate from a setting (``training.canary_rtol``); None: information unless the profile
    # bounds it. The judge applies it (``acceptance.profile.metrics.builtin_bound``); a bound that depends on
    # the run itself (its node count, a GPU's own slowdown temperature) is the caller's
    builtin: Callable[[S], Threshold | None] | None = None
    # a figure of a node's own hardware (its GPUs, its ports, the links inside it): a failing one blames the
    # nodes it names, where a figure measured across nodes may name the healthy end of a slow path (the drain
    # list's rule); None: the family's ``local``
    local: bool | None = None

    @property
    def names(self) -> str:
        """The names the shape stands for, after the family's prefix, in words: ``<op>.busbw_gbps@<size>``,
        ``{min,median}`` for a choice."""
        text = re.sub(r"\(\?P<(\w+)>\\w\+\)", r"<\1>", self.regex).replace("\\.", ".")
        return re.sub(
            r"\(([^()]*)\)",
            lambda m: "{" + m.group(1).replace("|", ",") + "}" if "|" in m.group(1) else m.group(1),
            text,
        )

    @property
    def each_name(self) -> tuple[str, ...]:
        """``names`` with every choice spelled out: one name (with its ``<op>``-style parts) each."""
        parts = re.split(r"\{([^{}]*)\}", self.names)  # text, choices, text, choices, ..., text
        options = [part.split(",") if i % 2 else [part] for i, part in enumerate(parts)]
        return tuple("".join(pick) for pick in itertools.product(*options))


@dataclass(frozen=True)
class Shapes(Generic[S]):
    """A family's metric declarations that share their words (``Metric.doc``) and their domains, given once:
    ``figure`` declares a shape with them, ``count`` a correctness count, whose bound is 0 whatever the
    section says (said here once, not on each count)."""

    doc: str
    domains: Mapping[str, Callable[[S], Sequence[str]]] = field(default_factory=dict)

    def figure(
        self,
        regex: str,
        better: Better,
        *,
        doc: str | None = None,
        scale: Scale = "relative",
        kind: Kind = "performance",
        devices: tuple[Device, ...] = ANY_DEVICE,
        builtin: Callable[[S], Threshold | None] | None = None,
        local: bool | None = None,
    ) -> Metric[S]:
        return Metric(regex, doc or self.doc, better, scale=scale, kind=kind, domains=self.domains, devices=devices,
                      builtin=builtin, local=local)  # fmt: skip

    def count(
        self, regex: str, *, doc: str | None = None, devices: tuple[Device, ...] = ANY_DEVICE, local: bool | None = None
    ) -> Metric[S]:
        return self.figure(
            regex, "lower", doc=doc, kind="correctness", devices=devices, builtin=must_be_zero, local=local
        )


# a probe's result as a re-measure merges it: read and written by the figures' names
Result = dict[str, Any]


@dataclass(frozen=True)
class Remeasure(Generic[S]):
    """How a family measures again, before they stand, the figures the run's judge would fail (a shared host's
    neighbours can hold a link down for seconds); the plugin drives it (``acceptance.plugin.remeasure``)."""

    times: Callable[[S], int]  # at most this many times more, from the family's section
    # the figures to measure again: ``fails(metric, value)`` is the run's judge, a baseline included
    low: Callable[[Result, Callable[[str, float], bool], S], list[str]]
    spec: Callable[[JSONObject, list[str]], JSONObject]  # the family's spec section for those figures alone
    merge: Callable[[Result, Result, list[str]], Result]  # the first result with those figures measured again


# this run's result of the probe run under a key (``isolation-1``, ``connectivity``), where it ran and
# succeeded; None: none such
Records = Callable[[str], Mapping[str, Any] | None]
# runs one job of an isolation: the probe's spec sections for it and its key; its result, or why it failed
RunRound = Callable[[Mapping[str, object], str], "Mapping[str, Any] | str"]


class Search(Protocol):
    """An isolation's outcome: who it named and why, in one line."""

    def message(self) -> str: ...


@dataclass(frozen=True)
class Isolating(Generic[S]):
    """How a family names the node or path behind a figure across nodes that failed: rounds of probe jobs that
    the run drives (``acceptance.run.isolation_rounds``: every node's pytest runs the same rounds in the same
    order, each cached under its key, so a second failing figure replays the same verdict)."""

    probe: str  # the probe each round runs; round N's key is ``<probe>-N``
    enabled: Callable[[S], bool]  # from the family's section (the run adds: 2 nodes or more)
    # the rounds until the verdict is in: the section, the profile model, the node count, the run's records
    isolate: Callable[[S, object, int, Records, RunRound], Search]
    hint: Callable[[Records], tuple[tuple[int, int], ...]]  # the node pairs round 1 starts from
    # where a slow collective's culprit is to be found, in words: the isolation's (replayed), or the slowest
    # links the run measured; the node count
    culprit: Callable[[Records, Search | None, int], str]


@dataclass(frozen=True)
class Behaviour(Generic[S]):
    """What the shared code calls a family for, in one place on its descriptor (``Family.behaviour``): each
    part is the family's own, defined in its package beside its rules, and optional; the shared code (init,
    the report, the preflight, the run, the baseline) asks every family of the registry for a part and passes
    over a family that has none."""

    # names the node or path behind a failed figure across nodes in rounds of probe jobs; None: no isolation
    isolation: Isolating[S] | None = None
    # whether another process left on the run's GPUs at its start is the node's own fault (its configuration:
    # drain), from its section, rather than foreign load (rerun once it is gone): the preflight asks
    leftover_drains: Callable[[S], bool] | None = None
    # the compilers its probes' dependencies build with under its section on the ``topology.device``, each with
    # the profile's setting that asks for it (``acceptance.run.toolchain``: the preflight looks them up)
    builds_with: Callable[[S, Device], list[tuple[Need, str]]] | None = None
    # the folder its probe reads this node's ports under, from its section: the plugin reads them in its own
    # process (``acceptance.run.fabric_readings``) beside the preflight, before any probe moved data over them
    # (the evidence's ``cluster.fabric_before``), and the family's test reads them again; None: no such reading
    reads_ports: Callable[[S], str] | None = None
    # measures again the figures the judge would fail before they stand; None: the first reading stands
    remeasure: Remeasure[S] | None = None
    # a stored figure's noise from the readings its evidence keeps beside it (``acceptance.schema.noise``):
    # ``noise(evidence, parts, size)`` for ``<family>.<parts joined by .>@<size>``; None: no readings kept
    noise: Callable[[StoredRun, list[str], str], Noise | None] | None = None
    # the floors ``init`` writes for its figures from the node's own links (``acceptance.schema.floors``):
    # which of the node's paths bound which figure, at what fraction and why; None: no figure of the links
    floors: Callable[[NodePaths], list[HardwareFloor]] | None = None
    # its section of the report (``acceptance.schema.report``): what it shows of the run, and its figures
    # per unit for the export; None: its figures appear in the report's tables of figures alone
    report: ReportSection | None = None
    # its part of the first profile ``init`` writes (``acceptance.schema.initial``): its section, the figures
    # its reference rows bound; None: nothing of its own (its section's defaults)
    initial: Initial | None = None


@dataclass(frozen=True)
class Family(Generic[S]):
    """One family of checks; the name is the same on every side (see the module's docstring)."""

    name: str
    doc: str  # one line: what the family checks
    section: type[S]  # the model of its profile section
    metrics: tuple[Metric[S], ...]
    # the probes the family runs (``acceptance.probes.<probe>``), and those of them the node's probe worker
    # may run: the ones that run on the whole world with the session's environment and keep nothing in the
    # process from one probe to the next (``Ctx.release``); training keeps a fresh process per job
    # (DeepSpeed's and torch.compile's module state, GPU memory)
    probes: tuple[str, ...] = ()
    in_worker: tuple[str, ...] = ()
    needs_every_gpu: bool = True  # its probes start a rank on every GPU of the node: skipped without them
    # its job starts ahead of its turn, its imports in the shadow of the modules timed on the GPU's own clock
    # right before its tests (``acceptance.plugin.training_stage``; the job: ``acceptance.run.training_jobs``)
    staged: bool = False
    # its figures are timed on the GPU's own clock (CUDA events, CUDA graphs), so that a job importing on the
    # host beside them cannot move one (``plugin.training_stage``)
    gpu_timed: bool = False
    # ... but some of its gated figures come from loops the host times: the sweeps under ``collectives.timing``
    # auto and nccl (NCCL called from a loop the host times, as nccl-tests does) or eager (torch's calls), and
    # the spread pass under any timing (how late each host comes back into a call); its probe waits until a
    # staged job's imports are over (``ClusterRun``)
    host_loops: bool = False
    # its probe measures first what activity on the host moves (compute's host links: DMA to and from host
    # memory read 22-25% slower on 4x H200 beside a staged job's imports), then lets a staged job import
    # (``let_import`` in its spec: ``acceptance.probes.rank.let_staged_import``)
    lets_import: bool = False
    # its result lists every rank's host and device: the evidence's ``cluster.nodes`` is taken from it
    describes_nodes: bool = False
    # its result lists each node's InfiniBand HCAs with their ports' rates (``hcas``): the report's reference
    # rows take the run's NICs from it
    describes_nics: bool = False
    # in the quick tier too (``acceptance.profile.tiers``): its probes take seconds and judge a node on their
    # own, so a job prolog or an init container can run them before every job
    quick: bool = False
    # runs only when selected: ``-m soak``, or a tier that includes it (``acceptance.plugin.opt_in``); the
    # standard suite keeps its time budget
    opt_in: bool = False
    # its figures are of a node's own hardware (``Metric.local``, which a metric may set otherwise), and so
    # is a failure of its tests that checked no figure (a probe that failed on the node)
    local: bool = False
    # what the shared code calls it for (``Behaviour``): its report section, init's part, its floors, ...
    behaviour: Behaviour[S] = field(default_factory=Behaviour)

    @property
    def beside_imports(self) -> bool:
        """Whether its probe may run while a staged job imports: every figure timed on the GPU's clock, and
        none that the host's activity moves (``host_loops``, ``lets_import``)."""
        return self.gpu_timed and not self.host_loops and not self.lets_import

    @property
    def module(self) -> str:
        """Its test module: a threshold of the family is enforced when this module was selected whole."""
        return f"test_{self.name}"

    @property
    def marker(self) -> str:
        return self.name

    @property
    def prefix(self) -> str:
        return f"{self.name}."

    def section_of(self, profile: object) -> S:
        """The family's section of a profile model (``ProfileModel``), typed."""
        found = getattr(profile, self.name)
        assert isinstance(found, self.section), f"{self.name}: {type(found).__name__}"
        return found

    def pattern(self, metric: Metric[S]) -> re.Pattern[str]:
        return re.compile(rf"^{re.escape(self.prefix)}{metric.regex}$")


class LoadedProfile(Protocol):
    """A loaded profile as a family's rules read it (``acceptance.profile.loader.Profile``): the model, whose
    sections a family reads with ``Family.section_of``; the file; and the sections as the file gave them."""

    @property
    def model(self) -> Strict: ...

    @property
    def path(self) -> Path: ...

    @property
    def resolved(self) -> JSONObject: ...
