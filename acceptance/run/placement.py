"""Where this pytest process stands in the cluster: node count, node rank and the rendezvous head.

Sources, first match wins: Slurm, a Kubernetes Indexed Job, plain NNODES / NODE_RANK / MASTER_ADDR /
MASTER_PORT, and finally the profile (one node, this host). Command-line options override single
fields of whatever the environment said, so ``--cluster-head`` alone can move the head of a Slurm job (the
same options set in the ini file do the same, and the source names the ini key).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

DEFAULT_PORT = 29400
LOOPBACK = "127.0.0.1"
# Slurm sets the step's list inside ``srun`` and the job's list in the batch script or ``salloc``;
# SLURM_NODEID counts within the step, so the step's list names the right head when both exist.
SLURM_LISTS = ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST")


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
        host = f"[{self.head}]" if ":" in self.head else self.head
        return f"{host}:{self.port}"


def split_head(text: str, default_port: int) -> tuple[str, int]:
    """``host[:port]``, ``[v6]:port`` or a bare IPv6 address -> (host, port)."""
    text = text.strip()
    if text.startswith("["):
        host, closed, rest = text[1:].partition("]")
        if not closed or not host or (rest and not rest.startswith(":")):
            raise TopologyError(f"head {text!r}: expected [IPv6]:PORT")
        return host, _port(rest[1:], text) if rest else default_port
    host, sep, port = text.rpartition(":")
    if sep and host and ":" not in host:
        return host, _port(port, text)
    if not text:
        raise TopologyError("head address is empty: expected HOST[:PORT]")
    return text, default_port


def _port(text: str, where: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise TopologyError(f"head {where!r}: port {text!r} is not a TCP port (1..65535)")
    return int(text)


def expand_nodelist(text: str) -> list[str]:
    """Expand Slurm's compressed host list: ``gpu-[01-03,07],login1`` -> gpu-01 gpu-02 gpu-03 gpu-07 login1.

    Several bracket groups in one name expand as a product (``a[1-2]-b[3-4]`` -> a1-b3 a1-b4 a2-b3 a2-b4),
    the order ``scontrol show hostnames`` prints. Zero padding follows the lower bound, as in Slurm.
    """
    hosts: list[str] = []
    for item in _split_top_level(text):
        hosts.extend(_expand_one(item, text))
    if not hosts:
        raise TopologyError(f"Slurm node list {text!r} names no host")
    return hosts


def _split_top_level(text: str) -> list[str]:
    items, depth, current = [], 0, ""
    for char in text.strip():
        depth += {"[": 1, "]": -1}.get(char, 0)
        if depth not in (0, 1):
            raise TopologyError(f"Slurm node list {text!r}: unbalanced or nested brackets")
        if char == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += char
    if depth != 0:
        raise TopologyError(f"Slurm node list {text!r}: unbalanced brackets")
    if any(not item for item in [*items, current]):
        raise TopologyError(f"Slurm node list {text!r}: empty entry between commas")
    return [*items, current]


_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def _expand_one(item: str, whole: str) -> list[str]:
    match = re.search(r"\[([^\]]*)\]", item)
    if match is None:
        return [item]
    prefix, suffix = item[: match.start()], item[match.end() :]
    out: list[str] = []
    for part in match.group(1).split(","):
        bounds = _RANGE.match(part.strip())
        if bounds is None:
            raise TopologyError(f"Slurm node list {whole!r}: {part!r} in {item!r} is not N or N-M")
        lo, hi = bounds.group(1), bounds.group(2) or bounds.group(1)
        if int(hi) < int(lo):
            raise TopologyError(f"Slurm node list {whole!r}: range {part!r} in {item!r} runs backwards")
        for number in range(int(lo), int(hi) + 1):
            out.extend(_expand_one(f"{prefix}{number:0{len(lo)}d}{suffix}", whole))
    return out


def _int(env: Mapping[str, str], key: str) -> int:
    try:
        return int(env[key])
    except ValueError:
        raise TopologyError(f"{key}={env[key]!r}: expected an integer") from None


def _port_from(env: Mapping[str, str], default_port: int) -> int:
    return _port(env["MASTER_PORT"], f"MASTER_PORT={env['MASTER_PORT']}") if "MASTER_PORT" in env else default_port


def _slurm(env: Mapping[str, str], default_port: int, launcher: str) -> Placement | None:
    # the controller (launcher srun) runs in the batch script or under salloc, where SLURM_NODEID may be unset
    if "SLURM_NNODES" not in env or ("SLURM_NODEID" not in env and launcher != "srun"):
        return None
    count = _int(env, "SLURM_NNODES")
    listed = next((env[k] for k in SLURM_LISTS if env.get(k)), None)
    if "MASTER_ADDR" in env:
        head = env["MASTER_ADDR"]
    elif listed is not None:
        head = expand_nodelist(listed)[0]
    elif count == 1:
        head = LOOPBACK
    else:
        raise TopologyError(f"SLURM_NNODES={count} but neither SLURM_JOB_NODELIST nor MASTER_ADDR names the head")
    host, port = split_head(head, _port_from(env, default_port))
    rank = _int(env, "SLURM_NODEID") if "SLURM_NODEID" in env else 0
    return Placement(count, rank, host, port, "slurm")


def _kubernetes(env: Mapping[str, str], profile_nodes: int, default_port: int) -> Placement | None:
    if "JOB_COMPLETION_INDEX" not in env:
        return None
    head = env.get("CLUSTER_HEAD") or env.get("MASTER_ADDR")
    if not head:
        raise TopologyError(
            "JOB_COMPLETION_INDEX is set but neither CLUSTER_HEAD nor MASTER_ADDR names the head pod "
            "(e.g. CLUSTER_HEAD=JOB-0.SERVICE, the headless Service's name for index 0)"
        )
    host, port = split_head(head, _port_from(env, default_port))
    count = _int(env, "NNODES") if "NNODES" in env else profile_nodes
    return Placement(count, _int(env, "JOB_COMPLETION_INDEX"), host, port, "kubernetes indexed job")


def _plain(env: Mapping[str, str], profile_nodes: int, default_port: int) -> Placement | None:
    if "NNODES" not in env and "NODE_RANK" not in env:
        return None
    host, port = split_head(env.get("MASTER_ADDR", LOOPBACK), _port_from(env, default_port))
    count = _int(env, "NNODES") if "NNODES" in env else profile_nodes
    rank = _int(env, "NODE_RANK") if "NODE_RANK" in env else 0
    return Placement(count, rank, host, port, "environment")


def resolve(
    env: Mapping[str, str],
    profile_nodes: int,
    *,
    nodes: int | None = None,
    node_rank: int | None = None,
    head: str | None = None,
    default_port: int = DEFAULT_PORT,
    launcher: str = "torchrun",
    given_by: str = "command line",
) -> Placement:
    """This node's placement; ``nodes``, ``node_rank`` and ``head`` (the run's settings, which
    ``given_by`` names: the command line, an ini key) override single fields of what the environment says."""
    found = (
        _slurm(env, default_port, launcher)
        or _kubernetes(env, profile_nodes, default_port)
        or _plain(env, profile_nodes, default_port)
    )
    if nodes is not None or node_rank is not None or head is not None:
        base = found or Placement(profile_nodes, 0, LOOPBACK, default_port, "profile")
        host, port = split_head(head, base.port) if head is not None else (base.head, base.port)
        source = given_by + (f" over {found.source}" if found else "")
        found = Placement(
            base.nodes if nodes is None else nodes,
            base.node_rank if node_rank is None else node_rank,
            host,
            port,
            source,
        )
    elif found is None:
        if profile_nodes > 1:
            raise TopologyError(
                f"the profile expects {profile_nodes} nodes but nothing says where this node stands: "
                "run under Slurm or a Kubernetes Indexed Job, set NNODES/NODE_RANK/MASTER_ADDR, or pass "
                "--cluster-nodes, --cluster-node-rank and --cluster-head"
            )
        found = Placement(1, 0, LOOPBACK, default_port, "profile (single node)")
    if found.nodes < 1:
        raise TopologyError(f"node count {found.nodes} (source: {found.source}): expected at least 1")
    if not 0 <= found.node_rank < found.nodes:
        raise TopologyError(f"node rank {found.node_rank} is outside 0..{found.nodes - 1} (source: {found.source})")
    return found
