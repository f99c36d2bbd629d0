"""The collectives' floors from the node's own links (``Behaviour.floors``): busbw from 256 MiB up, where a
collective is bound by its links rather than by its launch, inside one node or across one NVLink domain.
The fractions are set from what healthy machines measured (docs/measurements.md): no healthy machine we
measured fails them, while a node whose NVLink is unused (NCCL over PCIe and host memory: all_reduce 24-25
GB/s at 1 GiB on 4x H200 NV18) fails each of them by 4x."""

from __future__ import annotations

from acceptance.schema.floors import HardwareFloor, NodePaths, floor
from acceptance.schema.sizes import parse_size

NVLINK_BUSBW_FRACTION = 0.3
NVLINK_BUSBW_WHY = (
    "the lowest healthy busbw from 256 MiB up is 0.51 of the links' rate (2x H200 reduce_scatter 228.7 of "
    "450; sendrecv on 4x H200 read 156.8, 0.35, already at 64 MiB); NVLink unused reads 0.05 (24 GB/s)"
)
PCIE_BUSBW_FRACTION = 0.2
PCIE_BUSBW_WHY = "collectives through PCIe and host memory read 24-25 GB/s at 1 GiB on Gen5 x16 hosts (0.38-0.40)"
BUSBW_MIN_SIZE = "256M"  # below it a collective is bound by its launch, not by its links
# sendrecv goes to one peer, and a ring's broadcast passes each byte from one GPU to the next: on a board
# where GPUs are meshed directly (a 4-GPU HGX: 6 of each GPU's 18 links to each peer) one pair's links bound
# them, not the GPU's all
PAIR_BOUND_OPS = ("sendrecv", "broadcast")


def floors(paths: NodePaths) -> list[HardwareFloor]:
    """``collectives.<op>.busbw_gbps@<size>`` for each op swept at each size from ``BUSBW_MIN_SIZE`` up."""
    bus, pair = paths.collective, paths.collective_pair
    if bus is None:
        return []
    fraction, why = (NVLINK_BUSBW_FRACTION, NVLINK_BUSBW_WHY) if bus.nvlink else (PCIE_BUSBW_FRACTION, PCIE_BUSBW_WHY)
    big = [s for s in paths.sizes if parse_size(s) >= parse_size(BUSBW_MIN_SIZE)]
    out: list[HardwareFloor] = []
    for op in paths.ops:
        path = min((bus, pair), key=lambda p: p.gbps) if op in PAIR_BOUND_OPS and pair is not None else bus
        out += [floor(f"collectives.{op}.busbw_gbps@{s}", path, fraction, why, "collective") for s in big]
    return out
