"""The metric names a threshold may bound.

Each family is a pattern with named groups; a group named after a profile list (``op``, ``size``)
must take a value that list holds, so ``collectives.all_reduce.busbw_gbps@2G`` is rejected when the
profile does not sweep 2G. This is checked when the profile loads: a threshold key that no probe can
ever produce is a typo, and a typo must never silently turn a gate off.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from acceptance.profile.model import ProfileModel, Threshold
from acceptance.profile.sizes import SizeError, canonical_size

Better = Literal["higher", "lower", "none"]  # none: a count to match (world size), or a value with no good side
# How a change against a baseline run is measured (``compare``, ``--cluster-baseline``): relative to the old
# figure; in points, for a figure that is itself a fraction of another (0.004 -> 0.012 under the median is
# noise, not "200% worse"); or not at all, where the profile's bound alone judges the figure.
Scale = Literal["relative", "points", "bound"]


@dataclass(frozen=True)
class Family:
    pattern: re.Pattern[str]
    doc: str
    better: Better
    floor: float | None  # no figure of the family is ever below it; None: not known


# Every figure the probes produce is a count, a duration, a rate, a ratio of those (efficiency, MFU, loss
# ratio, shortfall under the median, clipped at 0), a temperature NVML reads as an unsigned integer, or a
# cross-entropy loss: none is ever below 0. A family that adds a figure that can be must pass floor=None.
def _family(regex: str, doc: str, better: Better, floor: float | None = 0.0) -> Family:
    return Family(re.compile(rf"^{regex}$"), doc, better, floor)


# only the figures a test checks: a bound on a figure no test reads would be a gate that never closes.
# One entry per shape and direction: compare and --cluster-baseline read which way a change is worse here.
_CONN = "connectivity.<figure>"
_COLL = "collectives.<op>.<busbw_gbps|time_us|wrong>@<size>"
_HEALTH = "health.<figure>"
_COMPUTE = "compute.<figure>_<min|median|below_median>"
_INTER = "internode.<all|intranode|one_gpu_per_node|ring>.<op>.<busbw_gbps|wrong>@<size>"
_TRAIN = "training.<strategy>.<figure>"
_STORAGE = "storage.<path>.<figure>"
_INTER_PATH = r"internode\.(all|intranode|one_gpu_per_node|ring)\.(?P<inter_op>\w+)"
_HEALTH_COUNTS = (
    r"nvml_unavailable|driver_too_old|gpu_model_mismatch|ecc_disabled|ecc_uncorrectable_volatile"
    r"|ecc_uncorrectable_aggregate|retired_pages_pending|row_remap_failures|row_remap_pending|pcie_degraded"
    r"|throttled|temperature_c_max|wall_s"
)
_COMPUTE_FIGURES = r"(matmul_tflops|matmul_fp8_tflops|copy_gbps|h2d_gbps|d2h_gbps)"
_STORAGE_PATH = r"storage\.(?P<storage_path>\w+)"
FAMILIES: list[Family] = [
    _family(r"connectivity\.(p2p_min_gbps)", _CONN, "higher"),
    _family(
        r"connectivity\.(duplicate_uuids|missing_ranks|allreduce_wrong|p2p_wrong|rendezvous_s|barrier_latency_us)",
        _CONN,
        "lower",
    ),
    _family(r"connectivity\.(world_size)", _CONN, "none"),
    _family(r"collectives\.(?P<op>\w+)\.busbw_gbps@(?P<size>\w+)", _COLL, "higher"),
    _family(r"collectives\.(?P<op>\w+)\.(time_us|wrong)@(?P<size>\w+)", _COLL, "lower"),
    _family(rf"health\.({_HEALTH_COUNTS})", _HEALTH, "lower"),
    _family(r"health\.(nvlink_links_min)", _HEALTH, "higher"),
    _family(r"health\.(gpu_count)", _HEALTH, "none"),
    _family(rf"compute\.{_COMPUTE_FIGURES}_(min|median)", _COMPUTE, "higher"),
    _family(rf"compute\.({_COMPUTE_FIGURES}_below_median|burnin_disagreeing_gpus|wall_s)", _COMPUTE, "lower"),
    _family(rf"{_INTER_PATH}\.busbw_gbps@(?P<inter_size>\w+)", _INTER, "higher"),
    _family(rf"{_INTER_PATH}\.wrong@(?P<inter_size>\w+)", _INTER, "lower"),
    _family(
        r"internode\.(?P<inter_op>\w+)\.efficiency@(?P<inter_size>\w+)", "internode.<op>.efficiency@<size>", "higher"
    ),
    _family(
        r"training\.(?P<strategy>\w+)\.(tokens_per_s_per_gpu|mfu|gpu_util_pct)",
        _TRAIN,
        "higher",
    ),
    _family(
        r"training\.(?P<strategy>\w+)\.(step_time_s|step_time_std_s|peak_mem_gib|loss_last|loss_ratio|wall_s)",
        _TRAIN,
        "lower",
    ),
    _family(r"training\.(?P<strategy>\w+)\.(loss_first)", _TRAIN, "none"),
    _family(r"training\.scaling_efficiency", "training.scaling_efficiency", "higher"),
    _family(r"training\.canary\.(?P<strategy>\w+)\.max_rel_diff", "training.canary.<strategy>.max_rel_diff", "lower"),
    _family(rf"{_STORAGE_PATH}\.(write_gbps|read_gbps|write_gbps_min|read_gbps_min|free_gib_min)", _STORAGE, "higher"),
    _family(
        rf"{_STORAGE_PATH}\.(unusable_nodes|nodes_not_shared|mount_mismatch|checkpoint_bad_ranks|write_below_median"
        r"|read_below_median|checkpoint_s|restore_s|left_behind)",
        _STORAGE,
        "lower",
    ),
    _family(r"storage\.wall_s", "storage.wall_s", "lower"),
    _family(r"internode\.(rail_min_gbps)", "internode.<rail_min_gbps|rail_wrong|isolation_culprits>", "higher"),
    _family(
        r"internode\.(rail_wrong|isolation_culprits)",
        "internode.<rail_min_gbps|rail_wrong|isolation_culprits>",
        "lower",
    ),
]

_DOMAINS: dict[str, Callable[[ProfileModel], tuple[str, ...]]] = {
    "op": lambda p: tuple(p.collectives.ops),
    "size": lambda p: tuple(p.collectives.sizes),
    "inter_op": lambda p: tuple(p.internode.ops),
    "inter_size": lambda p: tuple(p.internode.sizes),
    "strategy": lambda p: tuple(p.training.strategies),
    "storage_path": lambda p: tuple(p.storage.paths),
}


# The families, each with the test module that checks its metrics (``<family>.`` prefix), in the order a
# run takes them: cheap and diagnostic first, so a missing rank or a sick GPU is named before a long sweep;
# the probes timed on the GPU right before training, whose job starts in their shadow (plugin.training_stage).
# Explicit on purpose: a threshold is enforced when its family's module was selected whole, and the
# marker ``-m <family>`` selects exactly that module; neither may depend on how a file happens to be named.
FAMILY_MODULES: dict[str, str] = {
    "connectivity": "test_connectivity",
    "health": "test_health",
    "storage": "test_storage",
    "compute": "test_compute",
    "collectives": "test_collectives",
    "internode": "test_internode",
    "training": "test_training",
}
FAMILY_DOCS: dict[str, str] = {
    "connectivity": "every rank present, every link carries data (the connectivity probe)",
    "health": "NVML health of every GPU: count, model, driver, ECC, links, throttling",
    "compute": "per-GPU speed, every GPU at once: matmul, copies, host links, burn-in",
    "storage": "shared filesystem present and the same on every node; checkpoint write and read speed",
    "collectives": "collective bandwidth sweep inside the run, nccl-tests' way",
    "internode": "collectives across nodes against inside a node (2+ nodes)",
    "training": "short real training runs: DDP, FSDP, DeepSpeed ZeRO",
}


def family_of(metric: str) -> str:
    return metric.split(".", 1)[0]


def module_of(metric: str) -> str:
    """The test module that checks ``metric``: a threshold is enforced when that module was selected."""
    return FAMILY_MODULES.get(family_of(metric), f"test_{family_of(metric)}")


def family_of_module(module: str) -> str | None:
    return next((family for family, name in FAMILY_MODULES.items() if name == module), None)


def metric_problem(name: str, profile: ProfileModel) -> str | None:
    """Why ``name`` cannot be a metric of ``profile``, or None when it can."""
    for family in FAMILIES:
        match = family.pattern.match(name)
        if not match:
            continue
        for group, value in match.groupdict().items():
            domain = _DOMAINS.get(group)
            if domain is None or value is None:
                continue
            allowed = domain(profile)
            if group == "size" or group.endswith("_size"):
                try:
                    value = canonical_size(value)
                except SizeError as exc:
                    return str(exc)
            if value not in allowed:
                return f"{group} {value!r} is not in this profile's list {list(allowed)}"
        return None
    shapes = ", ".join(dict.fromkeys(f.doc for f in FAMILIES))
    return f"no probe measures a metric of this name (known shapes: {shapes})"


def bound_problem(name: str, bound: Threshold) -> tuple[str, str] | None:
    """The field of ``bound`` that can never hold, or always holds, for a figure never below its family's
    floor, and why; None when that is not so or not known. A gate that cannot fail checks nothing."""
    floor = next((f.floor for f in FAMILIES if f.pattern.match(name)), None)
    if floor is None:
        return None
    never = f"this figure is never below {floor:g}"
    if bound.max is not None and bound.max < floor:
        return "max", f"max {bound.max:g} can never hold: {never}"
    if bound.eq is not None and bound.eq < floor:
        return "eq", f"eq {bound.eq:g} can never hold: {never}"
    if bound.ref is not None and bound.tol is not None and bound.ref + bound.tol * abs(bound.ref) < floor:
        return "ref", f"ref {bound.ref:g} ± {bound.tol:.0%} can never hold: {never}"
    if bound.min is not None and bound.min <= floor:
        return "min", f"min {bound.min:g} always holds: {never} (raise it, or remove it to record the figure)"
    return None


# A shortfall under the median is a fraction already. A probe's wall time follows the suite's own job layout,
# and the hottest GPU's temperature follows the room and what ran before it: neither says the cluster got
# worse, and both have a bound for what matters (a hang, overheating). A canary's difference between
# strategies is rounding noise under its bound (``training.canary_rtol``), far tighter than any tolerance.
_POINTS = re.compile(r"^(compute\.\w+_below_median|storage\.\w+\.(write|read)_below_median)$")
_BOUND_ONLY = re.compile(r"^((\w+\.)*(wall_s|temperature_c_max)|training\.canary\.\w+\.max_rel_diff)$")


def scale(metric: str) -> Scale:
    """How a change of ``metric`` against a baseline run is measured (see ``Scale``)."""
    name = canonical_metric(metric)
    if _BOUND_ONLY.match(name):
        return "bound"
    return "points" if _POINTS.match(name) else "relative"


def better(metric: str) -> Better:
    """Which way ``metric`` improves: ``higher`` (bandwidth, throughput), ``lower`` (time, errors), or
    ``none`` (a count to match, or a name the registry does not know)."""
    name = canonical_metric(metric)
    for family in FAMILIES:
        if family.pattern.match(name):
            return family.better
    return "none"


def canonical_metric(name: str) -> str:
    """Spell the size part of a metric key canonically: ``...@1024M`` -> ``...@1G``."""
    head, sep, size = name.rpartition("@")
    if not sep:
        return name
    try:
        return f"{head}@{canonical_size(size)}"
    except SizeError:
        return name
