"""Per-GPU speed measured again before a low figure stands.

A shared host's other tenants can hold its links down for seconds. On a fresh 2x H200 machine the host links
read 43.8 GB/s in one suite and 53.0 a minute later; sixteen rounds of the same copies on another read
48.2-55.3, with or without processes importing beside them (docs/measurements.md, findings). So a figure
under its bound, or a GPU further under the median than the tolerance allows, is measured again
(``compute.remeasure`` times, every GPU at once as the first time), and the last reading is the one judged.
A figure that holds its bound but is worse than ``--cluster-baseline`` beyond the tolerance would fail as
well, and is measured again too: the run's judge decides both. A link that is really slow reads low every
time and still fails, with every reading in its message; one that was only crowded passes, and the evidence
keeps what it read first (``per_gpu[].earlier``, ``remeasured``).
"""

from __future__ import annotations

from typing import Any, cast

from acceptance.families import compute
from acceptance.families.compute import COMPUTE
from acceptance.json_types import JSONObject
from acceptance.numbers import fmt
from acceptance.plugin.checker import probe_result
from acceptance.run.cluster_run import ClusterRun
from acceptance.schema.bounds import Threshold

ROW_PARTS = ("windows", "clocks", "not_measured")  # a row's per-figure records, replaced with the figure


def tolerance(run: ClusterRun, figure: str) -> Threshold | None:
    """The bound of ``compute.<figure>_below_median``: the profile's, else ``compute.tolerance``."""
    return run.judge.bound(f"compute.{figure}_below_median")


def low_figures(run: ClusterRun, result: dict[str, Any]) -> list[str]:
    """The figures a test of ``test_compute`` would fail now, as the run's judge says: the slowest GPU or the
    median under its bound, or one GPU further under the median than the tolerance, or any of them worse than
    the --cluster-baseline run. A known issue (``xfail``) is not measured again."""
    low: list[str] = []
    for figure in compute.FIGURES:
        found = result["summary"].get(figure)
        if found is None or compute.partly_measured(result["rows"], figure):  # that fails whatever it reads
            continue
        shorts = compute.shortfalls(result["rows"], figure, COMPUTE.section_of(run.profile.model).median_of)
        bounded = [run.judge.fails(f"compute.{figure}_{stat}", float(found[stat])) for stat in ("min", "median")]
        within = run.judge.fails(f"compute.{figure}_below_median", shorts[0].fraction)
        if any(bounded) or within:
            low.append(figure)
    return low


def _gpu(row: dict[str, Any]) -> tuple[Any, ...]:
    """A GPU by its UUID (a job of its own may give the ranks out in another order), a CPU rank by host and rank."""
    return (row["uuid"],) if row.get("uuid") else (row.get("host"), row["rank"])


def merged(first: dict[str, Any], again: dict[str, Any], figures: list[str]) -> dict[str, Any]:
    """``first`` with ``figures`` as ``again`` measured them, each row keeping its earlier readings.

    A figure the re-measure measured on fewer GPUs than the first time keeps the first readings, and the
    reasons go into ``remeasured``: a GPU that could not measure it again must not turn a failure into a
    pass or a skip."""
    fresh = {_gpu(row): row for row in again["rows"]}
    now = [fresh.get(_gpu(row), {}) for row in first["rows"]]
    taken = [f for f in figures if len(compute.measured_rows(now, f)) >= len(compute.measured_rows(first["rows"], f))]
    rows = []
    for row, new_row in zip(first["rows"], now, strict=True):
        new, earlier = dict(row), {k: list(v) for k, v in (row.get("earlier") or {}).items()}
        for part in ROW_PARTS:
            new[part] = {k: v for k, v in (row.get(part) or {}).items() if k not in taken}
            new[part].update({k: v for k, v in (new_row.get(part) or {}).items() if k in taken})
        for figure in taken:
            earlier.setdefault(figure, []).append(row.get(figure))
            new[figure] = new_row.get(figure)
        new["earlier"] = earlier
        rows.append(new)
    out = dict(first, rows=rows)
    out["summary"] = {**first["summary"], **{f: compute.summary(rows, f) for f in taken}}
    out["not_measured"] = {**first["not_measured"], **{f: compute.not_measured(rows, f) for f in taken}}
    record = dict(first.get("remeasured") or {})
    for figure in figures:
        entry = record.setdefault(figure, {"earlier_min": []})
        if figure in taken:
            entry["earlier_min"].append((first["summary"].get(figure) or {}).get("min"))
        else:
            entry["not_measured_again"] = compute.not_measured(now, figure)
    out["remeasured"] = record
    return out


def measured(run: ClusterRun) -> dict[str, Any]:
    """The compute probe's result, its low figures (``low_figures``) measured again up to ``compute.remeasure``
    times."""
    result: dict[str, Any] = probe_result(run, "compute", dict)  # merged below by the figures' names
    times = COMPUTE.section_of(run.profile.model).remeasure
    for n in range(1, times + 1):
        figures = low_figures(run, result)
        if not figures:
            break
        why = "out of bounds" if run.baseline is None else "out of bounds or worse than --cluster-baseline"
        run.say(f"compute: {', '.join(figures)} {why}; measuring again ({n} of {times})")
        spec = run.spec("compute")
        again: JSONObject = {**cast(JSONObject, spec["compute"]), "figures": list(figures), "duration_s": 0}
        spec["compute"] = again  # those figures alone, and no second burn-in
        result = merged(result, probe_result(run, "compute", dict, spec=spec, key=f"compute-again-{n}"), figures)
    return result


def earlier_text(result: dict[str, Any], figure: str) -> str:
    """``measured again: the slowest GPU read 43.8 first`` for a figure measured more than once, else ""."""
    found = (result.get("remeasured") or {}).get(figure)
    if not found:
        return ""
    if found.get("not_measured_again"):
        why = "; ".join(found["not_measured_again"])
        return f"measured again, but not on every GPU ({why}): the readings before stand"
    readings = ", then ".join(fmt(v) for v in found["earlier_min"] if v is not None)
    return f"measured {len(found['earlier_min']) + 1} times: the slowest GPU read {readings} before this"
