"""The evidence of one run: the typed document, written atomically after every change that matters.

A run killed half-way still leaves a readable file marked ``"complete": false``. While tests report their
outcomes the file is rewritten at most every WRITE_EVERY_S (``write(soon=True)``): each rewrite serialises the
whole document, probe results and all, and at three reports a test that cost a suite of 260 tests about 20 s
on 2x H200. Every other write (a probe's start and end, the session's end) is at once and takes what waited.
Every read of an evidence file validates it against the model, so a report never renders a document it
misreads.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, cast

from pydantic import ValidationError

from acceptance.atomic_file import write_atomic
from acceptance.evidence.environment import allowed_env, software
from acceptance.evidence.model import Case, Check, ClusterRecord, EvidenceDoc, NodeRecord, ProbeRecord
from acceptance.evidence.verdict import verdict_of
from acceptance.json_types import JSONObject, JSONValue
from acceptance.masking import masked_command, masked_profile, secret_names
from acceptance.regular_file import FileRefused, read_regular
from acceptance.verdicts import RunVerdict

# what the evidence keeps of each device the connectivity probe found
DEVICE_FIELDS = ("rank", "local_rank", "device", "device_name", "uuid", "pci_bus_id", "memory_gib")


class EvidenceError(Exception):
    """An evidence file that cannot be read or does not follow the schema; the message names the file."""


class EvidenceWriteError(EvidenceError):
    """The evidence file cannot be written (a full or read-only disk); its last whole version stays."""


def finite(value: Any) -> Any:
    """``value`` with every NaN and infinity turned into None, recursively: strict JSON has no NaN, and a
    figure that is not a number must read as missing, never as a number."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(item) for item in value]
    return value


def dumps(data: Any) -> str:
    """Strict JSON: non-finite floats become null; anything else unknown (a Path) becomes its text."""
    return json.dumps(finite(data), indent=1, default=str, allow_nan=False)


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


# The largest evidence file read (CLUSTER_EVIDENCE_MAX_MB overrides): a suite of 260 tests on one node
# writes about 0.3 MB, so this holds the merge of some hundreds of nodes; reading takes about twice the
# file's size in memory, and a file far larger is not evidence this suite wrote
MAX_EVIDENCE_BYTES = 256 * 2**20
MAX_ENV = "CLUSTER_EVIDENCE_MAX_MB"


def _cap(path: Path) -> int:
    given = os.environ.get(MAX_ENV, "").strip()
    if not given:
        return MAX_EVIDENCE_BYTES
    try:
        return int(float(given) * 2**20)
    except ValueError:
        raise EvidenceError(f"{path}: {MAX_ENV}={given!r} is not a number of MB") from None


def _lone_surrogate(value: Any) -> str | None:
    """The first string holding half of a UTF-16 pair (JSON's ``"\\ud800"``): no file can hold it as text."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value
        return None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found = _lone_surrogate(key) or _lone_surrogate(item)
        if found is not None:
            return found
    return None


def read_evidence(path: Path) -> EvidenceDoc:
    """An evidence file (or a folder holding ``evidence.json``), validated into its model, its verdict
    decided again from what it holds (``verdict_of``): a stated PASS is never taken on trust. A file over
    the size cap, or holding text that is not Unicode, is refused naming the file."""
    path = path / "evidence.json" if path.is_dir() else path
    cap = _cap(path)
    try:
        data = read_regular(path, cap)
    except FileRefused as exc:
        raise EvidenceError(f"{path}: cannot read evidence: {exc} ({MAX_ENV} sets the cap)") from None
    try:
        raw = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise EvidenceError(f"{path}: cannot read evidence: {exc}") from None
    try:
        bad = _lone_surrogate(raw)
    except RecursionError:
        raise EvidenceError(f"{path}: cannot read evidence: nested too deep") from None
    if bad is not None:
        shown = bad.encode("utf-8", "backslashreplace").decode("ascii", "backslashreplace")
        raise EvidenceError(f"{path}: not valid Unicode: a lone surrogate in {shown[:80]!r}")
    try:
        doc = EvidenceDoc.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise EvidenceError(
            f"{path}: not a cluster-acceptance evidence file: {where}: {first['msg']} ({exc.error_count()} problem(s))"
        ) from None
    doc.verdict = verdict_of(doc)
    return doc


def as_data(doc: EvidenceDoc) -> JSONObject:
    """The document as plain JSON, as written to its file (NaN and infinities as null)."""
    return cast(JSONObject, finite(doc.model_dump(mode="json", by_alias=True, exclude_none=False)))


def _objects(value: JSONValue) -> list[JSONObject]:
    """The objects of a JSON list; none where it is not one."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


# a kill loses at most this much of the tests' outcomes, in a file that then says it is incomplete
WRITE_EVERY_S = 1.0


class Evidence:
    """The evidence of one pytest session (or one command) on one node; the only writer of its file."""

    def __init__(
        self,
        directory: Path,
        profile: JSONObject,
        topology: Mapping[str, object],
        env: Mapping[str, str],
        persist: bool = True,
    ) -> None:
        self.dir, self.persist = directory, persist
        extra = secret_names(profile)
        self.doc = EvidenceDoc.model_validate(
            {
                "started": now(),
                "command": masked_command(list(sys.argv), extra),
                "profile": masked_profile(profile),
                "topology": topology,
                "cluster": {"software": software(), "env": allowed_env(env, extra)},
            }
        )
        self._cases: dict[str, Case] = {}
        self._written_at: float | None = None  # time.monotonic() of the last write
        # strict: a write that fails raises EvidenceWriteError. A pytest session turns it off: its writes
        # happen inside pytest's hooks, where an exception is an INTERNALERROR; it reads ``unwritable`` (the
        # first failure, in one line) after each test instead and stops the run with it
        self.strict = True
        self.unwritable: str | None = None

    @property
    def path(self) -> Path:
        return self.dir / "evidence.json"

    @property
    def cluster(self) -> ClusterRecord:
        return self.doc.cluster

    def test(self, nodeid: str) -> Case:
        if nodeid not in self._cases:
            case = Case(nodeid=nodeid)
            self._cases[nodeid] = case
            self.doc.tests.append(case)
        return self._cases[nodeid]

    def has_test(self, nodeid: str) -> bool:
        return nodeid in self._cases

    def add_check(self, nodeid: str, check: Check) -> None:
        self.test(nodeid).checks.append(check)

    def checks(self) -> Iterator[Check]:
        for case in self.doc.tests:
            yield from case.checks

    def probe(self, name: str, key: str, env: Mapping[str, str] | None = None) -> ProbeRecord:
        record = ProbeRecord(name=name, key=key, env=dict(env) if env else None)
        self.doc.probes.append(record)
        return record

    def record_nodes(self, result: JSONObject) -> None:
        """The nodes and their devices as the connectivity probe found them (its ``ranks``, each a
        ``families.connectivity.RankDevice``), and the software it reported."""
        nodes: dict[int, NodeRecord] = {}
        for r in _objects(result.get("ranks")):
            node_rank = r["node_rank"]
            if not isinstance(node_rank, int):
                raise EvidenceError(f"the connectivity probe's rank {r.get('rank')}: node_rank {node_rank!r}")
            node = nodes.setdefault(node_rank, NodeRecord(host=str(r["host"]), node_rank=node_rank))
            node.devices.append({k: r[k] for k in DEVICE_FIELDS if k in r})
        cluster = self.doc.cluster
        cluster.nodes = list(nodes.values())
        found = result.get("software")
        if isinstance(found, dict):
            versions = {f"probe_{k}": v if v is None else str(v) for k, v in found.items()}
            cluster.software = {**cluster.software, **versions}

    def error(self, message: str) -> None:
        if message not in self.doc.errors:
            self.doc.errors.append(message)

    def finish(self, verdict: RunVerdict, *, complete: bool, partial: bool = False) -> None:
        self.doc.complete, self.doc.partial, self.doc.verdict = complete, partial, verdict
        self.doc.finished = now()

    def write(self, soon: bool = False) -> Path:
        """Write the document now, or with ``soon`` once WRITE_EVERY_S has passed since the last write (a
        later write takes the change with it)."""
        if not self.persist:
            return self.path
        at = time.monotonic()
        if soon and self._written_at is not None and at - self._written_at < WRITE_EVERY_S:
            return self.path
        try:
            write_atomic(self.path, dumps(as_data(self.doc)))
        except OSError as exc:
            self.unwritable = self.unwritable or f"evidence {self.path}: cannot write: {exc.strerror or exc}"
            if self.strict:
                raise EvidenceWriteError(self.unwritable) from None
            return self.path
        self._written_at = at
        return self.path
