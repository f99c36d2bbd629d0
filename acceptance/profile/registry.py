"""The families of the suite, one descriptor each: everything else about a family is derived from here.

A family (``collectives``, ``compute``, ...) has one name on every side: its probe
(``acceptance/probes/<name>.py``), its rules (``acceptance/families/<name>.py``), its test module
(``tests_cluster/test_<name>.py``), its pytest marker (``-m <name>``), its profile section (``<name>:``),
its timeout (``timeouts.<name>``) and its metric prefix (``<name>.``). Its descriptor says what differs:
the section's model, the shapes of its figures, where its probes may run and what they need. The profile
model, the timeouts, the markers, the run order, the preflight's skips, the probe worker's set, the
training job's staging and the docs' reference tables all read this registry; none lists the families again.

The shape of the registry follows nccl-tests, where one collective is one small ``testColl`` struct that a
shared loop drives, and torchtitan's typed ``TrainSpec`` registry.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from acceptance.profile.fields import Strict
from acceptance.profile.sections import (
    Collectives,
    Compute,
    Connectivity,
    Drift,
    Fabric,
    Health,
    Internode,
    Soak,
    Storage,
    Training,
)

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
    # its figures are timed on the GPU's own clock (CUDA events, CUDA graphs), so that a job importing on the
    # host beside them cannot move one (``plugin.training_stage``)
    gpu_timed: bool = False
    eager_timed: bool = False  # with ``collectives.timing: eager`` its small sizes are timed on the host
    # its result lists every rank's host and device: the evidence's ``cluster.nodes`` is taken from it
    describes_nodes: bool = False
    # in the quick tier too (``acceptance.profile.tiers``): its probes take seconds and judge a node on their
    # own, so a job prolog or an init container can run them before every job
    quick: bool = False
    # runs only when selected: ``-m soak``, or a tier that includes it (``acceptance.plugin.opt_in``); the
    # standard suite keeps its time budget
    opt_in: bool = False

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

    def section_of(self, profile: Strict) -> S:
        """The family's section of a profile model (``ProfileModel``), typed."""
        found = getattr(profile, self.name)
        assert isinstance(found, self.section), f"{self.name}: {type(found).__name__}"
        return found

    def pattern(self, metric: Metric[S]) -> re.Pattern[str]:
        return re.compile(rf"^{re.escape(self.prefix)}{metric.regex}$")


_COLL = "collectives.<op>.<busbw_gbps|time_us|wrong>@<size>"
_HEALTH = "health.<figure>"
_COMPUTE = "compute.<figure>_<min|median|below_median>"
_INTER = "internode.<all|intranode|one_gpu_per_node|ring>.<op>.<busbw_gbps|wrong>@<size>"
_RAIL = "internode.<rail_min_gbps|rail_wrong|isolation_culprits>"
_TRAIN = "training.<strategy>.<figure>"
_STORAGE = "storage.<path>.<figure>"
_HEALTH_COUNTS = (
    r"nvml_unavailable|driver_too_old|gpu_model_mismatch|ecc_disabled|ecc_uncorrectable_volatile"
    r"|ecc_uncorrectable_aggregate|retired_pages_pending|row_remap_failures|row_remap_pending|pcie_degraded"
    r"|throttled"
)
_COMPUTE_FIGURES = r"(matmul_tflops|copy_gbps)"
# the CPU path has no fp8 tensor cores and no device memory to copy to: "not applicable on the CPU"
_GPU_COMPUTE_FIGURES = r"(matmul_fp8_tflops|h2d_gbps|d2h_gbps)"
_INTER_PATH = r"(all|intranode|one_gpu_per_node|ring)\.(?P<op>\w+)"


def _ops(s: Collectives | Internode) -> Sequence[str]:
    return s.ops


def _sizes(s: Collectives | Internode) -> Sequence[str]:
    return s.sizes


def _strategies(s: Training) -> Sequence[str]:
    return s.strategies


def _paths(s: Storage) -> Sequence[str]:
    return tuple(s.paths)


_SWEEP = {"op": _ops, "size": _sizes}

CONNECTIVITY = Family(
    "connectivity",
    "every rank present, every link carries data (the connectivity probe)",
    Connectivity,
    (
        Metric[Connectivity](r"(p2p_min_gbps)", "connectivity.<figure>", "higher"),
        Metric[Connectivity](
            r"(duplicate_uuids|missing_ranks|allreduce_wrong|p2p_wrong)", "connectivity.<figure>", "lower",
            kind="correctness",
        ),
        Metric[Connectivity](r"(rendezvous_s|barrier_latency_us)", "connectivity.<figure>", "lower"),
        Metric[Connectivity](r"(world_size)", "connectivity.<figure>", "none", kind="correctness"),
    ),
    probes=("connectivity",),
    in_worker=("connectivity",),
    describes_nodes=True,
    quick=True,
)  # fmt: skip
HEALTH = Family(
    "health",
    "NVML health of every GPU: count, model, driver, ECC, links, throttling",
    Health,
    (  # NVML on GPUs: the health module skips on a CPU profile
        Metric[Health](rf"({_HEALTH_COUNTS})", _HEALTH, "lower", kind="correctness", devices=GPU_ONLY),
        Metric[Health](r"(temperature_c_max|wall_s)", _HEALTH, "lower", scale="bound", devices=GPU_ONLY),
        Metric[Health](r"(nvlink_links_min)", _HEALTH, "higher", kind="correctness", devices=GPU_ONLY),
        Metric[Health](r"(gpu_count)", _HEALTH, "none", kind="correctness", devices=GPU_ONLY),
    ),
    probes=("health",),
    in_worker=("health",),
    quick=True,
)
_DRIFT = "drift.<figure>"
DRIFT = Family(
    "drift",
    "every node and GPU agrees on software and settings; optionally pinned (a golden configuration)",
    Drift,
    (
        Metric[Drift](r"(nodes_differing|golden_mismatches)", _DRIFT, "lower", kind="correctness"),
        # GPU fields come from NVML: a CPU run has none to compare ("no GPU fields to compare")
        Metric[Drift](r"(gpus_differing)", _DRIFT, "lower", kind="correctness", devices=GPU_ONLY),
        # information: how much the comparison could not see (no NVML, no HCA); recorded, no built-in bound
        Metric[Drift](r"(fields_not_measured)", _DRIFT, "lower", scale="bound"),
    ),
    probes=("drift",),
    in_worker=("drift",),
    quick=True,
)
_PATH = r"(?P<storage_path>\w+)"
_IN_PATH = {"storage_path": _paths}
STORAGE = Family(
    "storage",
    "shared filesystem present and the same on every node; checkpoint write and read speed",
    Storage,
    (
        Metric[Storage](
            rf"{_PATH}\.(write_gbps|read_gbps|write_gbps_min|read_gbps_min|free_gib_min)", _STORAGE, "higher",
            domains=_IN_PATH,
        ),
        Metric[Storage](
            rf"{_PATH}\.(unusable_nodes|nodes_not_shared|mount_mismatch|checkpoint_bad_ranks|left_behind)",
            _STORAGE, "lower", kind="correctness", domains=_IN_PATH,
        ),
        Metric[Storage](
            rf"{_PATH}\.(write_below_median|read_below_median)", _STORAGE, "lower", scale="points", domains=_IN_PATH
        ),
        Metric[Storage](rf"{_PATH}\.(checkpoint_s|restore_s)", _STORAGE, "lower", domains=_IN_PATH),
        Metric[Storage](r"wall_s", "storage.wall_s", "lower", scale="bound"),
    ),
    probes=("storage",),
    in_worker=("storage",),
)  # fmt: skip
COMPUTE = Family(
    "compute",
    "per-GPU speed, every GPU at once: matmul, copies, host links, burn-in",
    Compute,
    (
        Metric[Compute](rf"{_COMPUTE_FIGURES}_(min|median)", _COMPUTE, "higher"),
        Metric[Compute](rf"{_COMPUTE_FIGURES}_below_median", _COMPUTE, "lower", scale="points"),
        Metric[Compute](rf"{_GPU_COMPUTE_FIGURES}_(min|median)", _COMPUTE, "higher", devices=GPU_ONLY),
        Metric[Compute](rf"{_GPU_COMPUTE_FIGURES}_below_median", _COMPUTE, "lower", scale="points", devices=GPU_ONLY),
        Metric[Compute](r"(burnin_disagreeing_gpus)", _COMPUTE, "lower", kind="correctness"),
        Metric[Compute](r"(wall_s)", _COMPUTE, "lower", scale="bound"),
    ),
    probes=("compute",),
    in_worker=("compute",),
    gpu_timed=True,
    quick=True,
)
COLLECTIVES = Family(
    "collectives",
    "collective bandwidth sweep inside the run, nccl-tests' way",
    Collectives,
    (
        Metric[Collectives](r"(?P<op>\w+)\.busbw_gbps@(?P<size>\w+)", _COLL, "higher", domains=_SWEEP),
        Metric[Collectives](r"(?P<op>\w+)\.time_us@(?P<size>\w+)", _COLL, "lower", domains=_SWEEP),
        Metric[Collectives](r"(?P<op>\w+)\.wrong@(?P<size>\w+)", _COLL, "lower", kind="correctness", domains=_SWEEP),
    ),
    probes=("collectives",),
    in_worker=("collectives",),
    gpu_timed=True,
    eager_timed=True,
)
INTERNODE = Family(
    "internode",
    "collectives across nodes against inside a node (2+ nodes)",
    Internode,
    (
        Metric[Internode](rf"{_INTER_PATH}\.busbw_gbps@(?P<size>\w+)", _INTER, "higher", domains=_SWEEP),
        Metric[Internode](rf"{_INTER_PATH}\.wrong@(?P<size>\w+)", _INTER, "lower", kind="correctness", domains=_SWEEP),
        Metric[Internode](
            r"(?P<op>\w+)\.efficiency@(?P<size>\w+)", "internode.<op>.efficiency@<size>", "higher", domains=_SWEEP
        ),
        Metric[Internode](r"(rail_min_gbps)", _RAIL, "higher"),
        Metric[Internode](r"(rail_wrong|isolation_culprits)", _RAIL, "lower", kind="correctness"),
    ),
    probes=("internode", "isolation"),
    in_worker=("internode", "isolation"),
    gpu_timed=True,
    eager_timed=True,
)
_STRATEGY = {"strategy": _strategies}
TRAINING = Family(
    "training",
    "short real training runs: DDP, FSDP, DeepSpeed ZeRO",
    Training,
    (
        Metric[Training](r"(?P<strategy>\w+)\.(tokens_per_s_per_gpu)", _TRAIN, "higher", domains=_STRATEGY),
        # a GPU's peak FLOP/s and its NVML utilisation: neither exists on the CPU
        Metric[Training](
            r"(?P<strategy>\w+)\.(mfu|gpu_util_pct)", _TRAIN, "higher", domains=_STRATEGY, devices=GPU_ONLY
        ),
        Metric[Training](
            r"(?P<strategy>\w+)\.(step_time_s|step_time_std_s|peak_mem_gib|loss_last)", _TRAIN, "lower",
            domains=_STRATEGY,
        ),
        Metric[Training](r"(?P<strategy>\w+)\.(loss_ratio)", _TRAIN, "lower", kind="correctness", domains=_STRATEGY),
        Metric[Training](r"(?P<strategy>\w+)\.(wall_s)", _TRAIN, "lower", scale="bound", domains=_STRATEGY),
        Metric[Training](r"(?P<strategy>\w+)\.(loss_first)", _TRAIN, "none", domains=_STRATEGY),
        Metric[Training](r"scaling_efficiency", "training.scaling_efficiency", "higher"),
        Metric[Training](
            r"canary\.(?P<strategy>\w+)\.max_rel_diff", "training.canary.<strategy>.max_rel_diff", "lower",
            scale="bound", kind="correctness", domains=_STRATEGY,
        ),
    ),
    probes=("training",),
)  # fmt: skip

_SOAK = "soak.<figure>"
SOAK = Family(
    "soak",
    "burn-in, every GPU at once for soak.duration_s: GEMM results, memory patterns, a checked all_reduce, NVML",
    Soak,
    (
        Metric[Soak](
            r"(gemm_wrong_elements|gemm_disagreeing_gpus|gemm_reference_errors|memory_bad_words|allreduce_wrong)",
            _SOAK, "lower", kind="correctness",
        ),
        # the share of the memory asked for that the patterns covered: a sanity gate (soak.memory_coverage_min)
        Metric[Soak](r"(memory_coverage)", _SOAK, "higher", scale="bound", kind="correctness"),
        # NVML's counters and events: none on the CPU
        Metric[Soak](
            r"(ecc_new_errors|remapped_rows_new|xid_new|slowdown_gpus)", _SOAK, "lower", kind="correctness",
            devices=GPU_ONLY,
        ),
        Metric[Soak](r"(bf16_tflops)_(min|median)", _SOAK, "higher"),
        Metric[Soak](r"(fp8_tflops)_(min|median)", _SOAK, "higher", devices=GPU_ONLY),
        Metric[Soak](r"(bf16_tflops)_(below_median|sag)", _SOAK, "lower", scale="points"),
        Metric[Soak](r"(fp8_tflops)_(below_median|sag)", _SOAK, "lower", scale="points", devices=GPU_ONLY),
        Metric[Soak](
            r"(temperature_c_max|memory_temperature_c_max|power_w_max)", _SOAK, "lower", scale="bound",
            devices=GPU_ONLY,
        ),
        # the share of soak.duration_s soaked: under 1 where the soak stopped part-way (its last checkpoint's)
        Metric[Soak](r"(completed_fraction)", _SOAK, "higher", scale="bound", kind="correctness"),
        Metric[Soak](r"(wall_s)", _SOAK, "lower", scale="bound"),
    ),
    probes=("soak",),
    opt_in=True,
)  # fmt: skip

_FABRIC = "fabric.<figure>"
FABRIC = Family(
    "fabric",
    "every InfiniBand/RoCE port's state, rate and error counters, read before and after the network probes",
    Fabric,
    (
        Metric[Fabric](r"(counter_increases)", _FABRIC, "lower", kind="correctness"),
        # information: ports not ACTIVE (an unused port is down by design) and ports read; a profile may bound them
        Metric[Fabric](r"(ports_down)", _FABRIC, "lower", scale="bound"),
        Metric[Fabric](r"(ports)", _FABRIC, "none", scale="bound"),
    ),
    probes=("fabric",),  # a sysfs read per node, in the node's own pytest (``acceptance.run.fabric_readings``)
    needs_every_gpu=False,
    quick=True,
)

# In the order a run takes them: cheap and diagnostic first, so a missing rank or a sick GPU is named before
# a long sweep; the families timed on the GPU right before training, whose job starts in their shadow; the
# soak (opt-in) after them: minutes of full load would heat every GPU before the suite's timed figures; the
# fabric's second reading last, after every probe that moved data over the network.
FAMILIES: tuple[Family[Any], ...] = (
    CONNECTIVITY, HEALTH, DRIFT, STORAGE, COMPUTE, COLLECTIVES, INTERNODE, TRAINING, SOAK, FABRIC
)  # fmt: skip
BY_NAME: Mapping[str, Family[Any]] = {f.name: f for f in FAMILIES}
WORKER_PROBES = frozenset(p for f in FAMILIES for p in f.in_worker)
PROBES = tuple(dict.fromkeys(p for f in FAMILIES for p in f.probes))


def family_named(name: str) -> Family[Any] | None:
    return BY_NAME.get(name)


def family_of_module(module: str) -> Family[Any] | None:
    """The family whose test module is ``module`` (a file's stem, ``test_collectives``), else None."""
    return next((f for f in FAMILIES if f.module == module), None)


def family_of_metric(metric: str) -> Family[Any] | None:
    return BY_NAME.get(metric.split(".", 1)[0])
