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

from acceptance.profile.model import ProfileModel
from acceptance.profile.sizes import SizeError, canonical_size


@dataclass(frozen=True)
class Family:
    pattern: re.Pattern[str]
    doc: str


def _family(regex: str, doc: str) -> Family:
    return Family(re.compile(rf"^{regex}$"), doc)


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
        rf"collectives\.internode\.(all|intranode|one_gpu_per_node|ring)\.(?P<inter_op>\w+)\.({_INTERNODE_FIELDS})"
        r"@(?P<inter_size>\w+)",
        "collectives.internode.<all|intranode|one_gpu_per_node|ring>.<op>.<busbw_gbps|wrong>@<size>",
    ),
    _family(
        r"collectives\.(?P<inter_op>\w+)\.internode_efficiency@(?P<inter_size>\w+)",
        "collectives.<op>.internode_efficiency@<size>",
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
    "inter_op": lambda p: tuple(p.collectives.internode.ops),
    "inter_size": lambda p: tuple(p.collectives.internode.sizes),
    "strategy": lambda p: tuple(p.training.strategies),
    "storage_path": lambda p: tuple(p.storage.paths),
}


def module_of(metric: str) -> str:
    """The test module that checks ``metric``: a threshold is enforced when that module was selected."""
    family = metric.split(".")[0]
    if family == "collectives" and (metric.startswith("collectives.internode.") or ".internode_efficiency@" in metric):
        return "test_internode"
    return f"test_{family}"


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


def canonical_metric(name: str) -> str:
    """Spell the size part of a metric key canonically: ``...@1024M`` -> ``...@1G``."""
    head, sep, size = name.rpartition("@")
    if not sep:
        return name
    try:
        return f"{head}@{canonical_size(size)}"
    except SizeError:
        return name
