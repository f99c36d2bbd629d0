"""The rail floor across nodes from the node's own links (``Behaviour.floors``): the slowest active RDMA port's
rate, or, across one multi-node NVLink domain (a GB200 NVL72 rack), each GPU's NVLink rate."""

from __future__ import annotations

from acceptance.families.connectivity import P2P_FRACTION
from acceptance.schema.floors import HardwareFloor, NodePaths, floor

NIC_FRACTION = 0.75
NIC_WHY = (
    "NCCL reaches ~96% of a port's line rate (~48 of an NDR port's 50 GB/s, nccl-tests #319; ~24 of HDR's 25, "
    "#252), and the reference rows' floor is 80% of that (0.77 of the line rate); a port trained at half its "
    "rate, or traffic over TCP sockets (3 GB/s on 400 Gb/s ports, aicr#2689), fails"
)
DOMAIN_RAIL_WHY = (
    "the p2p fraction of one GPU's NVLink, between trays of one NVLink domain (never measured here on GB200); a rail "
    "through the NICs (400 Gb/s: 50 GB/s per GPU) fails"
)


def floors(paths: NodePaths) -> list[HardwareFloor]:
    """``internode.rail_min_gbps``: the NICs' fraction of a port's rate, the p2p fraction of NVLink's."""
    rail = paths.rail
    if rail is None:
        return []
    fraction, why = (P2P_FRACTION, DOMAIN_RAIL_WHY) if rail.nvlink else (NIC_FRACTION, NIC_WHY)
    return [floor("internode.rail_min_gbps", rail, fraction, why, "rail")]
