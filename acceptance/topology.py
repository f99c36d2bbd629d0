"""Where this pytest process stands in the cluster: node count, node rank and the rendezvous head.

Sources, first match wins: command-line options, Slurm, a Kubernetes Indexed Job, plain
NNODES / NODE_RANK / MASTER_ADDR / MASTER_PORT, and finally the profile (one node, this host).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

DEFAULT_PORT = 29400


class TopologyError(ValueError):
    """The environment or options describe a topology that cannot work."""


@dataclass(frozen=True)
class Placement:
    nodes: int
    node_rank: int
    head: str
    port: int
    source: str

    @property
    def endpoint(self) -> str:
        return f"{self.head}:{self.port}"


def split_head(text: str, default_port: int) -> tuple[str, int]:
    """``host[:port]`` (or ``[v6]:port``) -> (host, port)."""
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") else default_port
    host, sep, port = text.rpartition(":")
    if sep and port.isdigit() and host and ":" not in host:
        return host, int(port)
    return text, default_port


def expand_nodelist(text: str) -> list[str]:
    """Expand Slurm's compressed host list: ``gpu-[01-03,07],login1`` -> gpu-01 gpu-02 gpu-03 gpu-07 login1."""
    hosts: list[str] = []
    for item in _split_top_level(text):
        hosts.extend(_expand_one(item))
    return hosts


def _split_top_level(text: str) -> list[str]:
    items, depth, current = [], 0, ""
    for char in text.strip():
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += char
    if depth != 0:
        raise TopologyError(f"unbalanced brackets in Slurm node list {text!r}")
    return [item for item in [*items, current] if item]


def _expand_one(item: str) -> list[str]:
    match = re.search(r"\[([^\]]+)\]", item)
    if match is None:
        return [item]
    prefix, suffix = item[: match.start()], item[match.end() :]
    out: list[str] = []
    for part in match.group(1).split(","):
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            raise TopologyError(f"bad range {part!r} in Slurm node list {item!r}")
        width = len(lo)
        for number in range(int(lo), int(hi or lo) + 1):
            out.extend(_expand_one(f"{prefix}{number:0{width}d}{suffix}"))
    return out


def _int(env: Mapping[str, str], key: str) -> int:
    try:
        return int(env[key])
    except ValueError:
        raise TopologyError(f"{key}={env[key]!r}: expected an integer") from None


def resolve(
    env: Mapping[str, str],
    profile_nodes: int,
    *,
    nodes: int | None = None,
    node_rank: int | None = None,
    head: str | None = None,
    default_port: int = DEFAULT_PORT,
) -> Placement:
    if nodes is not None or node_rank is not None or head is not None:
        host, port = split_head(head or "127.0.0.1", default_port)
        found = Placement(nodes or profile_nodes, node_rank or 0, host, port, "command line")
    elif "SLURM_NNODES" in env and "SLURM_NODEID" in env:
        first = expand_nodelist(env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST", "127.0.0.1"))[0]
        host, port = split_head(
            env.get("MASTER_ADDR", first), _int(env, "MASTER_PORT") if "MASTER_PORT" in env else default_port
        )
        found = Placement(_int(env, "SLURM_NNODES"), _int(env, "SLURM_NODEID"), host, port, "slurm")
    elif "JOB_COMPLETION_INDEX" in env:
        head_var = env.get("CLUSTER_HEAD") or env.get("MASTER_ADDR")
        if not head_var:
            raise TopologyError(
                "JOB_COMPLETION_INDEX is set but neither CLUSTER_HEAD nor MASTER_ADDR names the head pod"
            )
        host, port = split_head(head_var, _int(env, "MASTER_PORT") if "MASTER_PORT" in env else default_port)
        count = _int(env, "NNODES") if "NNODES" in env else profile_nodes
        found = Placement(count, _int(env, "JOB_COMPLETION_INDEX"), host, port, "kubernetes indexed job")
    elif "NNODES" in env or "NODE_RANK" in env:
        port = _int(env, "MASTER_PORT") if "MASTER_PORT" in env else default_port
        count = _int(env, "NNODES") if "NNODES" in env else profile_nodes
        found = Placement(
            count,
            _int(env, "NODE_RANK") if "NODE_RANK" in env else 0,
            env.get("MASTER_ADDR", "127.0.0.1"),
            port,
            "environment",
        )
    else:
        if profile_nodes > 1:
            raise TopologyError(
                f"the profile expects {profile_nodes} nodes but nothing says where this node stands: "
                "run under Slurm or a Kubernetes Indexed Job, set NNODES/NODE_RANK/MASTER_ADDR, or pass "
                "--cluster-nodes, --cluster-node-rank and --cluster-head"
            )
        found = Placement(1, 0, "127.0.0.1", default_port, "profile (single node)")
    if not 0 <= found.node_rank < found.nodes:
        raise TopologyError(f"node rank {found.node_rank} is outside 0..{found.nodes - 1} (source: {found.source})")
    return found
