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

from acceptance.profile.model import ProfileModel, Threshold
from acceptance.profile.sizes import SizeError, canonical_size


@dataclass(frozen=True)
class Family:
    pattern: re.Pattern[str]
    doc: str
    floor: float | None  # no figure of the family is ever below it; None: not known


# Every figure the probes produce is a count, a duration, a rate, a ratio of those (efficiency, MFU, loss
# ratio, shortfall under the median, clipped at 0), a temperature NVML reads as an unsigned integer, or a
# cross-entropy loss: none is ever below 0. A family that adds a figure that can be must pass floor=None.
def _family(regex: str, doc: str, floor: float | None = 0.0) -> Family:
    return Family(re.compile(rf"^{regex}$"), doc, floor)


# only the figures a test checks: a bound on a figure no test reads would be a gate that never closes
_COLL_FIELDS = "busbw_gbps|time_us|wrong"
_INTERNODE_FIELDS = "busbw_gbps|wrong"
FAMILIES: list[Family] = [
    _family(
        r"connectivity\.(world_size|duplicate_uuids|missing_ranks|allreduce_wrong|p2p_wrong"
        r"|rendezvous_s|barrier_latency_us|p2p_min_gbps)",
        "connectivity.<figure>",
    ),
    _family(
        rf"collectives\.(?P<op>\w+)\.({_COLL_FIELDS})@(?P<size>\w+)",
        "collectives.<op>.<busbw_gbps|time_us|wrong>@<size>",
    ),
    _family(
        r"health\.(nvml_unavailable|gpu_count|gpu_model_mismatch|driver_too_old|ecc_disabled"
        r"|ecc_uncorrectable_volatile|ecc_uncorrectable_aggregate|retired_pages_pending|row_remap_failures"
        r"|row_remap_pending|nvlink_links_min|pcie_degraded|throttled|temperature_c_max|wall_s)",
        "health.<figure>",
    ),
    _family(
        r"compute\.((matmul_tflops|matmul_fp8_tflops|copy_gbps|h2d_gbps|d2h_gbps)_(min|median|below_median)"
        r"|burnin_disagreeing_gpus|wall_s)",
        "compute.<figure>_<min|median|below_median>",
    ),
    _family(
        rf"internode\.(all|intranode|one_gpu_per_node|ring)\.(?P<inter_op>\w+)\.({_INTERNODE_FIELDS})"
        r"@(?P<inter_size>\w+)",
        "internode.<all|intranode|one_gpu_per_node|ring>.<op>.<busbw_gbps|wrong>@<size>",
    ),
    _family(
        r"internode\.(?P<inter_op>\w+)\.efficiency@(?P<inter_size>\w+)",
        "internode.<op>.efficiency@<size>",
    ),
    _family(
        r"training\.(?P<strategy>\w+)\.(tokens_per_s_per_gpu|tokens_per_s_per_gpu_median|step_time_s|step_time_std_s"
        r"|peak_mem_gib|mfu|gpu_util_pct|loss_first|loss_last|loss_ratio|wall_s)",
        "training.<strategy>.<figure>",
    ),
    _family(r"training\.scaling_efficiency", "training.scaling_efficiency"),
    _family(r"training\.canary\.(?P<strategy>\w+)\.max_rel_diff", "training.canary.<strategy>.max_rel_diff"),
    _family(
        r"storage\.(?P<storage_path>\w+)\.(unusable_nodes|nodes_not_shared|mount_mismatch|free_gib_min"
        r"|checkpoint_bad_ranks|write_gbps|read_gbps|write_gbps_min|read_gbps_min|write_below_median"
        r"|read_below_median|checkpoint_s|restore_s|left_behind)",
        "storage.<path>.<figure>",
    ),
    _family(r"storage\.wall_s", "storage.wall_s"),
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
# run takes them: cheap and diagnostic first, so a missing rank or a sick GPU is named before a long sweep.
# Explicit on purpose: a threshold is enforced when its family's module was selected whole, and the
# marker ``-m <family>`` selects exactly that module; neither may depend on how a file happens to be named.
FAMILY_MODULES: dict[str, str] = {
    "connectivity": "test_connectivity",
    "health": "test_health",
    "compute": "test_compute",
    "storage": "test_storage",
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
    shapes = ", ".join(f.doc for f in FAMILIES)
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


def canonical_metric(name: str) -> str:
    """Spell the size part of a metric key canonically: ``...@1024M`` -> ``...@1G``."""
    head, sep, size = name.rpartition("@")
    if not sep:
        return name
    try:
        return f"{head}@{canonical_size(size)}"
    except SizeError:
        return name
