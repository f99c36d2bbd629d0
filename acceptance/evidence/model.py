"""The evidence document as a pydantic model; ``evidence.schema.json`` is generated from it.

Free-form (JSON: pydantic's ``JsonValue``, ``acceptance.json_types`` to the type checker) where the content
belongs to a probe or a layer above (``measurements``, a probe's ``result``, the resolved profile, the plan,
the preflight's record); strict everywhere a pipeline reads a field to decide. Evidence written by earlier versions
(verdict PASS/FAIL only, no ``partial``) still validates: every field added since has a default.
"""

from __future__ import annotations

import json
from typing import Literal, cast

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from acceptance.json_types import JSONObject
from acceptance.verdicts import Category, FigureVerdict, Outcome, RunVerdict

SCHEMA_ID = "cluster-acceptance/evidence/1"

ProbeStatus = Literal["running", "ok", "failed", "interrupted"]


class Part(BaseModel):
    """Known fields typed; more may be present (a newer writer, a merge), and are kept."""

    model_config = ConfigDict(extra="allow", validate_assignment=True)


class Check(Part):
    metric: str
    value: int | float | None  # int kept as int: a count of wrong elements reads 0, not 0.0
    unit: str
    bound: str
    verdict: FigureVerdict
    threshold: dict[str, JsonValue] | None  # the bound's fields as the profile gave them (schema.bounds.Threshold)
    detail: str | None = None
    baseline: dict[str, JsonValue] | None = None  # --cluster-baseline: the earlier figure, its limit, the tolerance
    # a figure of the node's own hardware (``Metric.local``): a failing one blames the nodes it names (the
    # drain list's rule); None: a record from before it was kept, read as not local
    local: bool | None = Field(default=None, exclude_if=lambda v: v is None)


class Case(Part):
    """One pytest test: its outcome, its measurements and the figures it checked."""

    nodeid: str
    outcome: Outcome = "running"
    duration_s: float = Field(default=0.0, ge=0)
    measurements: dict[str, JsonValue] = {}
    checks: list[Check] = []
    message: str | None = None
    longrepr: str | None = None
    node: str | None = Field(default=None, exclude_if=lambda v: v is None)  # a merge's: the node that ran it
    # whose fault its failure is, where the run knows better than its figures (a time limit the operator
    # gave: environment); None: judged by its figures (acceptance.evidence.drain)
    category: Category | None = None
    # its family's figures are of a node's own hardware (``Family.local``); None: not a family's test
    local: bool | None = Field(default=None, exclude_if=lambda v: v is None)


class ProbeRecord(Part):
    name: str
    key: str
    status: ProbeStatus = "running"
    wall_s: float | None = None
    out_dir: str | None = None
    argv: list[str] | None = None
    result: dict[str, JsonValue] | None = None
    error: str | None = None
    env: dict[str, str] | None = None
    # seconds its job had been started ahead of its turn (staged) when the node came free; wall_s is after
    staged_s: float | None = None
    node: str | None = Field(default=None, exclude_if=lambda v: v is None)  # a merge's: the node that ran it


class ProfileRecord(Part):
    name: str
    path: str
    sha256: str = Field(pattern="^[0-9a-f]{64}$")
    extends: list[str] = []
    resolved: dict[str, JsonValue]


class TopologyRecord(Part):
    nodes: int = Field(ge=1)
    node_rank: int = Field(ge=0)
    head: str
    source: str
    ranks_per_node: int = Field(ge=1)
    world_size: int = Field(ge=1)
    host: str


class NodeRecord(Part):
    host: str
    node_rank: int | None = None
    devices: list[dict[str, JsonValue]] = []  # store.DEVICE_FIELDS of each rank on it


class ClusterRecord(Part):
    nodes: list[NodeRecord] = []
    software: dict[str, str | None] = {}
    env: dict[str, str] = {}
    plan: dict[str, JsonValue] | None = None  # multinode.plan's record of what the nodes agreed on
    node_verdicts: list[dict[str, JsonValue]] | None = None  # node 0's: each node's host, verdict, evidence
    preflight: dict[str, JsonValue] | None = None  # GPU profiles: what this node has against the profile
    # the fabric family's first reading of this node's ports, before any probe (acceptance.probes.fabric)
    fabric_before: dict[str, JsonValue] | None = None


class TierRecord(Part):
    """The run's tier (``--cluster-tier``): its families, the tests it left out, its budget and wall."""

    name: str
    families: list[str] = []
    added: list[str] = []  # opt-in families asked for by name beside the tier (-m soak)
    settings: dict[str, JsonValue] = {}  # the profile's settings for the tier (tiers.NAME); --cluster-set wins
    deselected: dict[str, int] = {}  # family -> tests the tier left out
    budget_s: float | None = None  # per node, for the profile's device; None: the tier has none of its own
    wall_s: float | None = None  # this node's session, collection to verdict


class MergedFrom(Part):
    """One document of a merge, as the merge found it."""

    host: str
    node: str | None = None  # node<rank>-<host>: hosts can share a name (containers, loopback runs)
    verdict: RunVerdict | None = None
    complete: bool | None = None
    profile_sha256: str | None = None


class EvidenceDoc(BaseModel):
    """One pytest session on one node (or a merge of several)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, populate_by_name=True)

    schema_: Literal["cluster-acceptance/evidence/1"] = Field(default="cluster-acceptance/evidence/1", alias="schema")
    complete: bool = False
    partial: bool = False
    verdict: RunVerdict = "FAIL"
    started: str
    finished: str | None = None
    command: list[str] = []
    profile: ProfileRecord
    topology: TopologyRecord
    cluster: ClusterRecord = ClusterRecord()
    probes: list[ProbeRecord] = []
    tests: list[Case] = []
    # every test the run selected: JUnit rebuilt from a killed run's evidence counts those that never started
    selected: list[str] = []
    unchecked_thresholds: list[str] = []
    errors: list[str] = []
    tier: TierRecord | None = None
    merged_from: list[MergedFrom] | None = None


def json_schema() -> JSONObject:
    """The JSON schema of the evidence, as shipped in ``evidence.schema.json``."""
    schema = cast(JSONObject, EvidenceDoc.model_json_schema(by_alias=True, mode="serialization"))
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_ID, **schema}


def schema_text() -> str:
    return json.dumps(json_schema(), indent=1, sort_keys=True) + "\n"
