"""Pair matrices found in an evidence file, whatever their producer: the point-to-point links of the
connectivity probe, node-pair rounds of an isolation search, or any measurement shaped like a matrix.

Accepted shapes (anywhere in a test's measurements, two levels deep at most):
``{"pairs": [{"a": .., "b": .., "busbw_gbps": ..}, ...]}`` (endpoint keys a/b, src/dst, node_a/node_b,
from/to, i/j; the value is the first of the known figure names, else the first other number),
a bare list of such pairs, and ``{"labels": [...], "matrix": [[...], ...]}`` (or nodes/names, values).
"""

from __future__ import annotations

from collections.abc import Iterator

from acceptance.evidence.model import EvidenceDoc
from acceptance.json_types import JSONObject, JSONValue
from acceptance.schema.report import Matrix

_ENDS = (("a", "b"), ("src", "dst"), ("node_a", "node_b"), ("from", "to"), ("i", "j"), ("left", "right"))
_VALUES = ("busbw_gbps", "gbps", "bandwidth_gbps", "algbw_gbps", "value", "time_us", "latency_us")
_NOT_VALUES = {"bytes", "wrong", "rank", "round", "size_bytes", "count", "iters"}
_LABELS = ("labels", "nodes", "names")
_CELLS = ("matrix", "values")


def _end(pair: JSONObject, key: str) -> str:
    host = pair.get(f"{key}_host")
    return f"{host}:{pair[key]}" if host is not None else str(pair[key])


def _value(pair: JSONObject, ends: tuple[str, str]) -> tuple[str, float] | None:
    numbers = {k: v for k, v in pair.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    for key in _VALUES:
        if key in numbers:
            return key, float(numbers[key])
    for key, value in numbers.items():
        if key not in ends and key not in _NOT_VALUES and not key.endswith("_host"):
            return key, float(value)
    return None


def from_pairs(title: str, pairs: list[JSONValue]) -> Matrix | None:
    cells: dict[tuple[str, str], float] = {}
    unit, ends_seen = "", ("", "")
    for pair in pairs:
        if not isinstance(pair, dict):
            return None
        ends = next((e for e in _ENDS if e[0] in pair and e[1] in pair), None)
        found = _value(pair, ends) if ends else None
        if ends is None or found is None:
            return None
        unit, ends_seen = unit or found[0], ends
        cells[(_end(pair, ends[0]), _end(pair, ends[1]))] = found[1]
    labels = sorted({e for pair in cells for e in pair}, key=_order)
    if len(labels) < 2:
        return None
    grid = [[cells.get((a, b)) for b in labels] for a in labels]
    return Matrix(title, labels, grid, unit, rows=ends_seen[0], columns=ends_seen[1])


def _order(label: str) -> tuple[str, int, str]:
    head, _, tail = label.rpartition(":")
    return (head, int(tail), "") if tail.isdigit() else (label, -1, label)


def from_grid(title: str, found: JSONObject) -> Matrix | None:
    labels = next((v for k in _LABELS if isinstance(v := found.get(k), list)), None)
    grid = next((v for k in _CELLS if isinstance(v := found.get(k), list)), None)
    if labels is None or grid is None or len(grid) != len(labels):
        return None
    rows = [row for row in grid if isinstance(row, list) and len(row) == len(labels)]
    if len(rows) != len(grid):
        return None
    cells = [[_number(v) for v in row] for row in rows]
    return Matrix(title, [str(x) for x in labels], cells, str(found.get("unit") or ""))


def _number(value: JSONValue) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _candidates(title: str, value: JSONValue, depth: int) -> Iterator[Matrix]:
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        found = from_pairs(title, value)
        if found is not None:
            yield found
            return
    if not isinstance(value, dict) or depth > 2:
        return
    if isinstance(listed := value.get("pairs"), list):
        found = from_pairs(title, listed)
        if found is not None:
            yield found
            return
    grid = from_grid(title, value)
    if grid is not None:
        yield grid
        return
    for key, inner in value.items():
        yield from _candidates(f"{title} {key}", inner, depth + 1)


def matrices(data: EvidenceDoc) -> list[Matrix]:
    """Every pair matrix in the tests' measurements, once (a merged file repeats them per node)."""
    out: dict[str, Matrix] = {}
    for test in data.tests:
        name = test.nodeid.rpartition("::")[2]
        for key, value in test.measurements.items():
            for found in _candidates(f"{key} pairs, {name}", value, 0):
                out.setdefault(repr((found.labels, found.cells)), found)
    return list(out.values())
