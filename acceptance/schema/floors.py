"""A floor from the node's own hardware, as a family writes it: what carries the family's traffic (a
``LinkPath``, found by ``acceptance.profile.floors`` from what NVML and sysfs say), times a stated fraction.

The paths are the node's, named for where the traffic goes (``NodePaths``); each family says which of them
bound which of its figures, at what fraction and why (``Behaviour.floors``), and ``init`` writes the floors
(``acceptance.profile.initial``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# Where a floor's traffic goes, in the order init lists the floors: between two GPUs of a node, the world's
# collectives (inside a node, or one NVLink domain), one rail across nodes, a GPU to its host
Reach = Literal["pair", "collective", "rail", "host"]
REACHES: tuple[Reach, ...] = ("pair", "collective", "rail", "host")


@dataclass(frozen=True)
class LinkPath:
    """What carries traffic between two GPUs, or from a GPU to its peers: its rate and the fact it is from."""

    gbps: float
    fact: str
    nvlink: bool


@dataclass(frozen=True)
class HardwareFloor:
    metric: str
    minimum: float
    fact: str  # the fact and the rate: "NVLink4 18 links x 25 GB/s (NVIDIA H100 datasheet: ...)"
    fraction: float
    why: str
    reach: Reach

    @property
    def source(self) -> str:
        return f"hardware floor: {self.fact} x {self.fraction:g} ({self.why})"

    def words(self) -> str:
        return f"hardware floor, {self.fact} x {self.fraction:g}"


def floor(metric: str, path: LinkPath, fraction: float, why: str, reach: Reach) -> HardwareFloor:
    """``path``'s rate times ``fraction``, rounded to 0.1 GB/s, as the floor of ``metric``."""
    return HardwareFloor(metric, round(path.gbps * fraction, 1), path.fact, fraction, why, reach)


@dataclass(frozen=True)
class NodePaths:
    """The paths of one node that bound its figures, each None where the node has none or the run does not
    use it (``acceptance.profile.floors``), and what the profile sweeps."""

    pair: LinkPath | None  # the slowest pair of GPUs inside the node
    # what the world's collectives run over, where the world is one node or one NVLink domain; else None
    collective: LinkPath | None
    # the slowest pair's path where it may bound a collective that moves data pair by pair (inside a node)
    collective_pair: LinkPath | None
    rail: LinkPath | None  # one rail across nodes: the NICs', or NVLink's across one domain (``nvlink``)
    host: LinkPath | None  # the slowest GPU's link to its host
    ops: tuple[str, ...]  # the collectives the profile sweeps
    sizes: tuple[str, ...]  # ... at these sizes
