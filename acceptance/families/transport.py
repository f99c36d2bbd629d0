"""The transport NCCL used between two ranks, read from NCCL's own report, and asserted against what the
hardware offers. Torch-free: the connectivity and collectives probes record, these rules judge.

With ``NCCL_DEBUG=INFO`` (``NCCL_DEBUG_SUBSYS=INIT,P2P,NET``) NCCL writes one line per channel of every
connection it sets up (``src/transport/p2p.cc``, ``shm.cc``, ``net.cc``)::

    host:pid:tid [0] NCCL INFO Channel 00/1 : 0[0] -> 1[1] via P2P/CUMEM/read
    host:pid:tid [0] NCCL INFO Channel 00 : 0[0] -> 1[1] via SHM/direct/direct
    host:pid:tid [0] NCCL INFO Channel 00/0 : 0[0] -> 2[0] [send] via NET/IB/0/GDRDMA
    host:pid:tid [0] NCCL INFO Channel 00/0 : 2[0] -> 0[0] [receive] via NET/Socket/0

``R[D]``: the rank in the communicator and its GPU's NVML index (``nvmlDev``: NVML's order, whatever
``CUDA_VISIBLE_DEVICES`` says). The sending rank logs a P2P or SHM line (the other side logs none); both
sides of a NET connection log theirs. So every line of a rank's log has this rank on one side, and a
P2P or SHM peer is on this rank's host: its GPU index names it whatever communicator the line came from.
A NET peer may be on any node: it is named by its rank in the communicator where that rank's GPU
confirms it (the world's communicator, which the probes' traffic runs on), else on a single node by its
GPU, else left unresolved (recorded, never judged).

Where NVML says two GPUs of a node are joined by NVLink (``nvmlDeviceGetP2PStatus`` with the NVLink
capability), traffic between their ranks must go P2P; SHM or NET between them is a mismatch, named with
the setting that forced it when the environment has one. Across nodes the same holds for two GPUs of one
NVLink domain (``families.nvlink_domain``: one clique of a GB200 NVL72 rack), whose P2P lines say
``P2P/MNNVL`` and name a peer on another node: such a peer is named by its world rank, as a NET peer is.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Literal

from typing_extensions import NotRequired, TypedDict

from acceptance.families.nvlink_domain import label as domain_label
from acceptance.schema.figure import Figure

# the settings that steer NCCL off NVLink, in the order a message names them
FORCING = (
    "NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "NCCL_IB_DISABLE", "NCCL_NET", "NCCL_P2P_LEVEL", "NCCL_MNNVL_ENABLE",
    "NCCL_CUMEM_ENABLE",
)  # fmt: skip
# what the probes set in each rank before its process group exists (``probes.nccl_log``)
DEBUG_SETTINGS = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,P2P,NET"}

Kind = Literal["P2P", "SHM", "NET"]

_CHANNEL = re.compile(
    r"NCCL INFO Channel \d+(?:/\d+)? : (?P<src>\d+)\[(?P<src_dev>\d+)\] -> (?P<dst>\d+)\[(?P<dst_dev>\d+)\]"
    r"(?: \[(?P<side>send|receive)\])? via (?P<transport>(?P<kind>P2P|SHM|NET)/\S+)"
)
_OWN_DEVICE = re.compile(r"NCCL INFO .*\bcudaDev (?P<cuda>\d+) nvmlDev (?P<nvml>\d+)\b")


class Connection(TypedDict):
    """One channel's connection as NCCL reported it: ranks in its communicator, GPUs by NVML index."""

    src: int
    src_dev: int
    dst: int
    dst_dev: int
    transport: str  # as NCCL spells it: P2P/CUMEM/read, SHM/direct/direct, NET/IB/0/GDRDMA, NET/Socket/0
    kind: Kind
    receive: bool  # the receiving side's line of a NET connection: this rank is ``dst``


class RankLog(TypedDict):
    """What one rank's NCCL log says: where the rank is, its GPU's NVML index, the connections it set up."""

    rank: int  # global
    host: str
    local_rank: int
    dev: int | None  # NVML index (None: NCCL logged no line naming it)
    connections: list[Connection]
    # the rank's node (its node rank): two nodes may share a host name (two jobs' shares of one machine, as
    # NCCL_HOSTID tells NCCL); absent: the host is the node
    node: NotRequired[int]
    settings: NotRequired[dict[str, str]]  # the FORCING settings of this rank's own environment
    # across nodes (``families.net_path``): NCCL's index -> NIC name from its ``NET/IB : Using`` line, and the
    # settings of this rank's environment that steer the NIC and GPUDirect RDMA (net_path.NET_SETTINGS)
    nics: NotRequired[dict[int, str]]
    net_settings: NotRequired[dict[str, str]]


class PairTransport(TypedDict):
    """The transports NCCL used from one rank to another (every channel's), and what the node offers."""

    src: int  # global ranks
    dst: int
    src_host: str
    dst_host: str
    src_gpu: int  # local ranks
    dst_gpu: int
    transports: list[str]
    nvlink: bool | None  # NVML: an NVLink joins the two GPUs; None: not known (another node, no answer)
    expected: str | None  # "P2P" where NVLink joins them; None: nothing asserted
    mismatch: bool
    domain: NotRequired[str]  # across nodes: the NVLink domain both GPUs are of (``nvlink_domain.domain``)
    same_node: NotRequired[bool]  # the two ranks are of one node (absent: one host)
    settings: NotRequired[dict[str, str]]  # the FORCING settings of either rank's environment


class Unresolved(TypedDict):
    """A NET connection whose peer could not be told apart (recorded, not judged)."""

    rank: int
    peer_comm_rank: int
    peer_dev: int
    transport: str


# whose fault a finding across nodes is, in the evidence's words (acceptance.evidence.causes.Category)
Category = Literal["hardware", "fabric", "configuration", "environment"]


class NetFinding(TypedDict):
    """A NET connection that went another way than the hardware offers, named with its cause
    (``families.net_path`` judges them; the record keeps them)."""

    host: str
    gpu: int  # NVML index
    text: str
    category: Category


class TransportRecord(TypedDict):
    """A probe's record of the transports: its pairs, what NVML answered per node, the forcing settings."""

    recorded: bool
    reason: str  # why nothing was recorded, or what was
    pairs: list[PairTransport]
    unresolved: list[Unresolved]
    nvlink_known: bool  # NVML answered on every node whose pairs were seen
    settings: dict[str, str]  # FORCING settings the ranks' environment had
    nvlink: NotRequired[dict[str, dict[str, bool]]]  # host -> "a-b" (NVML indices) -> joined by NVLink
    network: NotRequired[list[NetFinding]]  # across nodes: GPUDirect RDMA and NIC findings (families.net_path)
    network_paths: NotRequired[list[str]]  # the GPU-to-NIC paths those rules judged (``net_path.paths``)


# how a mismatch names the setting that forced it: a setting of the run, not a fault of the node
FORCED_BY_SETTING = "set in the environment"


def parse(text: str) -> tuple[int | None, list[Connection]]:
    """A rank's NCCL log: its GPU's NVML index (from ``ncclCommInitRank ... cudaDev C nvmlDev N`` or, failing
    that, from its side of a connection) and every connection line, in order."""
    connections: list[Connection] = []
    own: int | None = None
    for line in text.splitlines():
        found = _CHANNEL.search(line)
        if found is not None:
            connections.append(_connection(found))
            continue
        device = _OWN_DEVICE.search(line)
        if device is not None and own is None:
            own = int(device["nvml"])
    if own is None and connections:
        first = connections[0]
        own = first["dst_dev"] if first["receive"] else first["src_dev"]
    return own, connections


def _connection(found: re.Match[str]) -> Connection:
    kind: Kind = "P2P" if found["kind"] == "P2P" else "SHM" if found["kind"] == "SHM" else "NET"
    return {
        "src": int(found["src"]),
        "src_dev": int(found["src_dev"]),
        "dst": int(found["dst"]),
        "dst_dev": int(found["dst_dev"]),
        "transport": found["transport"],
        "kind": kind,
        "receive": found["side"] == "receive",
    }


def settings(environ: Mapping[str, str]) -> dict[str, str]:
    """The settings of FORCING that ``environ`` has, in FORCING's order."""
    return {name: environ[name] for name in FORCING if environ.get(name, "") != ""}


def pair_key(a: int, b: int) -> str:
    """Two NVML indices of one node as NVML answers are keyed: the lower first."""
    return f"{min(a, b)}-{max(a, b)}"


Domains = Mapping[str, Mapping[int, str]]  # host -> NVML index -> the NVLink domain of that GPU


def resolve(
    logs: Sequence[RankLog], nvlink: Mapping[str, Mapping[str, bool]], domains: Domains | None = None
) -> tuple[list[PairTransport], list[Unresolved]]:
    """Every rank pair that NCCL connected, src -> dst in global ranks, with its transports and what NVML
    says of the two GPUs (``nvlink``: host -> ``pair_key`` -> joined by NVLink; a host absent: not known;
    ``domains``: the NVLink domain of each GPU that has one)."""
    by_device = {(r["host"], r["dev"]): r for r in logs if r["dev"] is not None}
    by_rank = {r["rank"]: r for r in logs}
    one_node = len({r["host"] for r in logs}) == 1
    found: dict[tuple[int, int], set[str]] = {}
    unresolved: list[Unresolved] = []
    for log in logs:
        for conn in log["connections"]:
            peer_rank, peer_dev = (conn["src"], conn["src_dev"]) if conn["receive"] else (conn["dst"], conn["dst_dev"])
            kind = "NET" if conn["transport"].startswith("P2P/MNNVL") else conn["kind"]  # a peer on another node
            peer = _peer(log, kind, peer_rank, peer_dev, by_device, by_rank, one_node)
            if peer is None:
                unresolved.append(
                    {"rank": log["rank"], "peer_comm_rank": peer_rank, "peer_dev": peer_dev,
                     "transport": conn["transport"]}
                )  # fmt: skip
                continue
            src, dst = (peer, log) if conn["receive"] else (log, peer)
            found.setdefault((src["rank"], dst["rank"]), set()).add(conn["transport"])
    pairs = [_pair(by_rank[s], by_rank[d], sorted(t), nvlink, domains or {}) for (s, d), t in sorted(found.items())]
    return pairs, _distinct(unresolved)


def _peer(
    log: RankLog,
    kind: Kind,
    comm_rank: int,
    dev: int,
    by_device: Mapping[tuple[str, int], RankLog],
    by_rank: Mapping[int, RankLog],
    one_node: bool,
) -> RankLog | None:
    """The rank at the other end of one of ``log``'s connections (see the module's docstring)."""
    if kind != "NET" or one_node:  # P2P and SHM stay inside a node
        return by_device.get((log["host"], dev))
    world = by_rank.get(comm_rank)
    return world if world is not None and world["dev"] == dev and world["rank"] != log["rank"] else None


def _node(log: RankLog) -> tuple[str, int | None]:
    return log["host"], log.get("node")


def _domain(src: RankLog, dst: RankLog, domains: Domains) -> str | None:
    """The NVLink domain two GPUs of different nodes are both of, if any."""
    if src["dev"] is None or dst["dev"] is None:
        return None
    a, b = domains.get(src["host"], {}).get(src["dev"]), domains.get(dst["host"], {}).get(dst["dev"])
    return a if a is not None and a == b else None


def _pair(
    src: RankLog, dst: RankLog, transports: list[str], nvlink: Mapping[str, Mapping[str, bool]], domains: Domains
) -> PairTransport:
    joined: bool | None = None
    same = _node(src) == _node(dst)
    domain = None if same else _domain(src, dst, domains)
    if same and src["dev"] is not None and dst["dev"] is not None:
        joined = nvlink.get(src["host"], {}).get(pair_key(src["dev"], dst["dev"]))
    elif domain is not None:
        joined = True
    expected = "P2P" if joined else None
    pair: PairTransport = {
        "same_node": same,
        "src": src["rank"],
        "dst": dst["rank"],
        "src_host": src["host"],
        "dst_host": dst["host"],
        "src_gpu": src["local_rank"],
        "dst_gpu": dst["local_rank"],
        "transports": transports,
        "nvlink": joined,
        "expected": expected,
        "mismatch": expected is not None and any(not t.startswith(f"{expected}/") for t in transports),
    }
    if domain is not None:
        pair["domain"] = domain
    if "settings" in src or "settings" in dst:  # the ranks' own environments (a log of before: the run's)
        pair["settings"] = {**dst.get("settings", {}), **src.get("settings", {})}
    return pair


def _distinct(found: list[Unresolved]) -> list[Unresolved]:
    seen: dict[tuple[int, int, int, str], Unresolved] = {}
    for u in found:
        seen.setdefault((u["rank"], u["peer_comm_rank"], u["peer_dev"], u["transport"]), u)
    return list(seen.values())


def record(
    logs: Sequence[RankLog],
    nvlink: Mapping[str, Mapping[str, bool] | str],
    environ: Mapping[str, str],
    domains: Domains | None = None,
) -> TransportRecord:
    """The probe's record from every rank's log and each host's NVML answer (a string: why NVML did not
    answer there). The forcing settings are every rank's (each node may have its own environment), else
    ``environ``'s."""
    known = {host: dict(answer) for host, answer in nvlink.items() if not isinstance(answer, str)}
    pairs, unresolved = resolve(logs, known, domains)
    hosts = {p["src_host"] for p in inside_nodes(pairs)}
    ranks = [log["settings"] for log in logs if "settings" in log]
    forcing = {k: v for found in ranks for k, v in found.items()} if ranks else settings(environ)
    missing = sorted(h for h in hosts if h not in known)
    why = "; ".join(f"{h}: {nvlink[h]}" for h in missing if isinstance(nvlink.get(h), str))
    return {
        "recorded": bool(pairs or unresolved),
        "reason": f"{len(pairs)} rank pairs from NCCL's log"
        + (f"; NVLink not known on {', '.join(missing)}" + (f" ({why})" if why else "") if missing else ""),
        "pairs": pairs,
        "unresolved": unresolved,
        "nvlink_known": not missing,
        "settings": dict(sorted(forcing.items(), key=lambda kv: FORCING.index(kv[0]))),
        "nvlink": known,
    }


def not_recorded(reason: str, environ: Mapping[str, str]) -> TransportRecord:
    """A record that says why there is none (gloo: no NCCL; the user's own ``NCCL_DEBUG_FILE``)."""
    return {"recorded": False, "reason": reason, "pairs": [], "unresolved": [], "nvlink_known": False,
            "settings": settings(environ)}  # fmt: skip


def inside_nodes(pairs: Sequence[PairTransport]) -> list[PairTransport]:
    return [p for p in pairs if p.get("same_node", p["src_host"] == p["dst_host"])]


def judged(pairs: Sequence[PairTransport]) -> list[PairTransport]:
    """The pairs a transport figure judges: those inside a node, and those across nodes of one NVLink domain."""
    return [p for p in pairs if p.get("same_node", p["src_host"] == p["dst_host"]) or "domain" in p]


def asserted(pairs: Sequence[PairTransport]) -> list[PairTransport]:
    """The pairs whose transport the hardware decides (an NVLink joins the two GPUs)."""
    return [p for p in pairs if p["expected"] is not None]


def mismatches(pairs: Sequence[PairTransport]) -> list[PairTransport]:
    return [p for p in pairs if p["mismatch"]]


def describe(pair: PairTransport, forcing: Mapping[str, str]) -> str:
    """``host GPU 0 -> GPU 1: SHM/direct/direct, expected P2P (NVLink joins the GPUs; NCCL_P2P_DISABLE=1
    set in the environment)``: what a person needs to find the link and the cause."""
    peer = f"GPU {pair['dst_gpu']}"
    peer = peer if pair["dst_host"] == pair["src_host"] else f"{pair['dst_host']} {peer}"
    where = f"{pair['src_host']} GPU {pair['src_gpu']} -> {peer}"
    domain = pair.get("domain")
    cause = "NVLink joins the GPUs" if domain is None else f"one NVLink domain: {domain_label(domain)}"
    forcing = _forcing(pair, forcing)
    if forcing:
        cause += "; " + ", ".join(f"{k}={v}" for k, v in forcing.items()) + f" {FORCED_BY_SETTING}"
    elif domain is not None:
        cause += "; no NCCL setting forced it: NCCL did not enable MNNVL (check the IMEX channel, " + (
            "/dev/nvidia-caps-imex-channels, and nvidia-imex-ctl -N)"
        )
    else:
        cause += "; no NCCL setting forced it: NCCL found no usable NVLink path (check nvidia-smi topo -m)"
    return f"{where}: {', '.join(pair['transports'])}, expected {pair['expected']} ({cause})"


def pair_map(pairs: Sequence[PairTransport]) -> dict[str, str]:
    """The pair-by-transport map the evidence keeps: ``host GPU a -> host GPU b`` -> transports."""
    return {
        f"{p['src_host']} GPU {p['src_gpu']} -> {p['dst_host']} GPU {p['dst_gpu']}": ", ".join(p["transports"])
        for p in pairs
    }


def unjudged(pairs: Sequence[PairTransport], found: TransportRecord) -> str | None:
    """Why ``pairs`` (of ``found``) assert nothing, or None where some must go over NVLink."""
    if not found["recorded"]:
        return f"the transport NCCL used is not known: {found['reason']}"
    if asserted(pairs):
        return None
    if not found["nvlink_known"]:
        return f"which GPUs NVLink joins is not known ({found['reason']}); the transports are recorded"
    return f"NVML says no NVLink joins any of the {len(pairs)} rank pairs: nothing to assert (transports recorded)"


def summary(pairs: Sequence[PairTransport], forcing: Mapping[str, str]) -> str:
    """The figure's detail: how many pairs NVLink joins, and every one that went another way."""
    joined, bad = asserted(pairs), mismatches(pairs)
    if not bad:
        return f"{len(joined)} rank pairs joined by NVLink, each over P2P"
    named = "; ".join(describe(p, forcing) for p in bad)
    return f"{len(bad)} of {len(joined)} rank pairs joined by NVLink went another way: {named}"


# Up to this many bytes a call over host memory (SHM, NCCL_P2P_DISABLE=1) read as fast as over NVLink, on 2x
# H200 at 64 B, and only NCCL over the network (sockets: 2-3x slower there) slows it (docs/measurements.md,
# "Latency at 64 B"). Larger calls: unmeasured, so any transport a setting forced is taken as slowing them.
HOST_MEMORY_AS_FAST_UP_TO = 64
SLOWS_SMALL_MESSAGES = ("NET/",)


def forced(found: TransportRecord | None, size_bytes: int | None = None) -> str:
    """Where a setting of the run's environment sent pairs that NVLink joins another way, the line a slowed
    figure (a p2p or busbw under its floor) names as its cause: the setting's, not the node's
    (``plugin.drain_hooks.categorize``); "" where no setting did. ``size_bytes``: the figure's call, where it
    has one; up to ``HOST_MEMORY_AS_FAST_UP_TO`` only the pairs sent over the network are a cause."""
    slowing = SLOWS_SMALL_MESSAGES if size_bytes is not None and size_bytes <= HOST_MEMORY_AS_FAST_UP_TO else ()
    if found is None or not found["settings"]:
        return ""
    bad = [
        p
        for p in mismatches(judged(found["pairs"]))
        if _forcing(p, found["settings"]) and (not slowing or any(t.startswith(slowing) for t in p["transports"]))
    ]
    if not bad:
        return ""
    union = {k: v for p in bad for k, v in _forcing(p, found["settings"]).items()}
    forcing = ", ".join(f"{k}={v}" for k, v in union.items())
    return f"NCCL's transport: {len(bad)} rank pair(s) joined by NVLink went another way, {forcing} {FORCED_BY_SETTING}"


def _forcing(pair: PairTransport, run: Mapping[str, str]) -> Mapping[str, str]:
    """The settings that forced ``pair``: its two ranks' own where the record has them (each node's
    environment may differ), else the run's."""
    own = pair.get("settings")
    return own if own is not None else run


def figure(metric: str, found: TransportRecord | None) -> Figure:
    """``metric`` (``<family>.transport_mismatches``): the rank pairs inside a node that NVLink joins (or across
    nodes of one NVLink domain) and whose traffic NCCL sent another way, each named with the setting that forced
    it, and every NET connection without the GPUDirect RDMA or the nearest NIC the hardware offers
    (``families.net_path``). Skipped, saying why, where nothing can be asserted: no NCCL (gloo), NCCL's log not
    ours, NVLink not known or joining no pair."""
    fig = Figure(metric, "pairs")
    if found is None:
        fig.skip = "the probe's result records no transport (a result from before it was recorded)"
        return fig
    pairs = judged(found["pairs"])
    network, paths = found.get("network", []), found.get("network_paths", [])
    reason = unjudged(pairs, found)
    if reason is not None and not paths:
        fig.skip = reason
        return fig
    bad = mismatches(pairs)
    lines = [summary(pairs, found["settings"])] if reason is None else []
    if paths and not network:
        lines.append(f"{len(paths)} GPU-to-NIC paths across nodes, each as the hardware offers it")
    lines += [f["text"] for f in network]
    fig.value = len(bad) + len(network)
    fig.findings += ["; ".join(lines)] if lines else []
    return fig
