"""The internode family: collectives across nodes against the same inside each node (2+ nodes), the rails
(GPU i of one node to GPU i of another: the connectivity probe's rail rounds, judged with its link rules),
and the isolation that names the node, rail or path when a figure across nodes fails (``isolation``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Annotated, Literal

from pydantic import Field, model_validator
from typing_extensions import TypedDict

from acceptance.families.collectives import GroupFigure, RankMeasured
from acceptance.families.connectivity import ConnectivityResult as ConnectivityResult
from acceptance.families.connectivity import matrices as matrices
from acceptance.families.connectivity import slowest as slowest
from acceptance.families.connectivity import wrong as wrong
from acceptance.families.internode import rounds
from acceptance.families.internode.floors import floors
from acceptance.families.internode.isolation import Isolation
from acceptance.families.internode.report import REPORT
from acceptance.schema.collectives import COLLECTIVE_OPS
from acceptance.schema.family import Behaviour, Family, Isolating, Records, RunRound, Shapes
from acceptance.schema.fields import Size, Strict
from acceptance.schema.figure import Figure
from acceptance.schema.initial import Initial, InitialSetup
from acceptance.schema.noise import Noise, at, items, results, size_of, windows_noise
from acceptance.schema.stored import StoredRun


class Internode(Strict):
    """Collectives across nodes next to the same inside each node; measured when there are 2+ nodes."""

    ops: list[Literal[COLLECTIVE_OPS]] = ["all_reduce"]  # type: ignore[valid-type]
    sizes: list[Size] = ["256M", "1G"]
    ring: bool = False  # also across nodes with NCCL_ALGO=Ring
    one_gpu_per_node: bool = False  # also with local rank 0 of each node only: the network alone
    # when a figure across nodes fails: name the node and the rail in rounds of node pairs (none when healthy)
    isolation: bool = True
    # the effect size worth naming in those rounds: a node or path at this fraction of the healthy (median)
    # pair is named, on two cleared witnesses within a false-blame budget (acceptance.families.internode.isolation)
    slow_pair_fraction: Annotated[float, Field(gt=0, lt=1)] = 0.5  # 1 would be no slowdown at all
    # the mildest slowdown named where the noise lets the rounds tell it apart (a NIC trained at a lower
    # rate, a noisy neighbour); never bolder than slow_pair_fraction: set it equal to name only that
    mild_pair_fraction: Annotated[float, Field(gt=0, lt=1)] = 0.8

    @model_validator(mode="after")
    def _mild_not_bolder(self) -> Internode:
        if self.mild_pair_fraction < self.slow_pair_fraction:
            raise ValueError(
                f"mild_pair_fraction {self.mild_pair_fraction} is below slow_pair_fraction "
                f"{self.slow_pair_fraction}: the mildest slowdown named cannot be a larger one"
            )
        return self


_INTER = "internode.<all|intranode|one_gpu_per_node|ring>.<op>.<busbw_gbps|wrong>@<size>"
_RAILS = Shapes[Internode]("internode.<rail_min_gbps|rail_wrong|isolation_culprits>")
_INTER_PATH = r"(all|intranode|one_gpu_per_node|ring)\.(?P<op>\w+)"


def _ops(s: Internode) -> Sequence[str]:
    return s.ops


def _sizes(s: Internode) -> Sequence[str]:
    return s.sizes


def noise(evidence: StoredRun, parts: list[str], size: str) -> Noise | None:
    """The noise of ``internode.<scope>.<op>.busbw_gbps@<size>`` from its row's timed windows."""
    if not (size and len(parts) == 3 and parts[2] == "busbw_gbps"):
        return None
    scope, op = parts[0], parts[1]
    for result in results(evidence, "internode"):
        for row in items(result.get("rows")):
            if at(row, "scope") == scope and at(row, "op") == op and size_of(at(row, "size")) == size:
                return windows_noise(row, f"{scope} busbw")
    return None


def _isolation_on(s: Internode) -> bool:
    return s.isolation


def _isolate(s: Internode, model: object, nodes: int, records: Records, run_round: RunRound) -> Isolation:
    found = Isolation(nodes, s.slow_pair_fraction, s.mild_pair_fraction, hint=rounds.hint(records))
    return rounds.isolate(found, model, run_round)


def initial_metrics(figure: str, _holds_at: Callable[[int], bool], setup: InitialSetup) -> list[str]:
    """A reference row bounds its figure across nodes, on 2+ nodes."""
    return [figure] if setup.nodes >= 2 else []


_SWEEP = Shapes[Internode](_INTER, {"op": _ops, "size": _sizes})
INTERNODE = Family(
    "internode",
    "collectives across nodes against inside a node (2+ nodes)",
    Internode,
    (
        _SWEEP.figure(rf"{_INTER_PATH}\.busbw_gbps@(?P<size>\w+)", "higher"),
        _SWEEP.count(rf"{_INTER_PATH}\.wrong@(?P<size>\w+)"),
        _SWEEP.figure(r"(?P<op>\w+)\.efficiency@(?P<size>\w+)", "higher", doc="internode.<op>.efficiency@<size>"),
        _RAILS.figure(r"(rail_min_gbps)", "higher"),
        _RAILS.count(r"(rail_wrong|isolation_culprits)"),
    ),
    probes=("internode", "isolation"),
    in_worker=("internode", "isolation"),
    gpu_timed=True,
    host_loops=True,
    behaviour=Behaviour(
        isolation=Isolating(rounds.PROBE, _isolation_on, _isolate, rounds.hint, rounds.culprit),
        noise=noise,
        floors=floors,
        report=REPORT,
        initial=Initial(metrics=initial_metrics),
    ),
)


class ScopedMeasured(RankMeasured):
    scope: str


class ScopeGroup(GroupFigure):
    ranks_of_group: list[int]


class InternodeRow(GroupFigure):
    """One op at one size in one scope: the slowest group's figure, the groups' mean and every group."""

    scope: str
    op: str
    size: str
    busbw_gbps_mean: float
    groups: list[ScopeGroup]


class InternodeResult(TypedDict):
    world_size: int
    nodes: int
    dtype: str
    backend: str
    rows: list[InternodeRow]
    nccl_version: str | None
    nccl_algo: str


Case = tuple[str, str]  # (op, size)


def row_of(result: InternodeResult, scope: str, case: Case) -> InternodeRow | None:
    """The probe's row for ``scope`` and the case, else None."""
    op, size = case
    return next((r for r in result["rows"] if r["scope"] == scope and r["op"] == op and r["size"] == size), None)


def _unmeasured(fig: Figure, scope: str, case: Case) -> Figure:
    fig.unmeasured.append(f"the internode probe has no {scope} row for {case[0]} at {case[1]}")
    return fig


def _groups(row: InternodeRow) -> str:
    groups = "; ".join(f"ranks {g['ranks_of_group']}: {g['busbw_gbps']:.2f} GB/s" for g in row["groups"])
    return f"{row['op']} {row['size']} over {row['ranks']} ranks, timing {row['timing']}; {groups}"


def busbw_figure(result: InternodeResult, scope: str, case: Case, metric: str) -> Figure:
    """``metric``: the busbw of ``scope``'s row for the case, each group's named; a row the probe did not
    measure fails it as unmeasured."""
    fig, row = Figure(metric, "GB/s"), row_of(result, scope, case)
    if row is None:
        return _unmeasured(fig, scope, case)
    fig.value = row["busbw_gbps"]
    fig.findings.append(_groups(row))
    return fig


def efficiency_figure(result: InternodeResult, case: Case) -> Figure:
    """Busbw over every node over the mean busbw inside one node, for the case."""
    fig = Figure("internode.{}.efficiency@{}".format(*case), "ratio")
    across, inside = row_of(result, "all", case), row_of(result, "intranode", case)
    if across is None:
        return _unmeasured(fig, "all", case)
    if inside is None:
        return _unmeasured(fig, "intranode", case)
    fig.value = across["busbw_gbps"] / inside["busbw_gbps_mean"]
    fig.findings.append(
        f"busbw {across['busbw_gbps']:.2f} GB/s over {across['ranks']} ranks / "
        f"{inside['busbw_gbps_mean']:.2f} GB/s inside one node (mean of {len(inside['groups'])} nodes)"
    )
    return fig


def wrong_figures(result: InternodeResult, case: Case) -> list[Figure]:
    """The wrong elements of every row of the case, one figure per scope."""
    op, size = case
    rows = [r for r in result["rows"] if r["op"] == op and r["size"] == size]
    return [Figure(f"internode.{r['scope']}.{op}.wrong@{size}", "elements", r["wrong"]) for r in rows]


def wrong_figure(result: InternodeResult, scope: str, case: Case, metric: str) -> Figure:
    """``metric``: the wrong elements of ``scope``'s row for the case; a row the probe did not measure fails
    it as unmeasured."""
    fig, row = Figure(metric, "elements"), row_of(result, scope, case)
    if row is None:
        return _unmeasured(fig, scope, case)
    fig.value = row["wrong"]
    return fig


def rail_figures(rails: ConnectivityResult) -> tuple[Figure, Figure]:
    """The wrong elements over every rail and the slowest rail; nodes that measured no rail between them:
    unmeasured, never a pass."""
    wrong_links = wrong(rails["rails"])
    wrong_fig = Figure(
        "internode.rail_wrong", "elements", rails["rails_wrong"], findings=[wrong_links] if wrong_links else []
    )
    measured, found = rails["rails"], rails["rails_slowest"]
    fig = Figure("internode.rail_min_gbps", "GB/s")
    if found is None:
        fig.unmeasured.append(f"no rail across nodes was measured ({len(measured)} links)")
        return wrong_fig, fig
    fig.value = found["gbps"]
    fig.findings.append(
        f"{len(measured)} rail links, {rails['p2p_size']} each way in {rails['rails_rounds']} round(s); "
        f"slowest: {slowest(measured)}"
    )
    return wrong_fig, fig
