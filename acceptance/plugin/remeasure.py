"""A figure measured again before it stands: the family's rule (``Behaviour.remeasure``) says which figures the
run's judge would fail and how to measure them alone; this drives it through the run's probes. Compute's
host links are the case (``acceptance.families.compute``, ``REMEASURE``)."""

from __future__ import annotations

from typing import Any, cast

from acceptance.json_types import JSONObject
from acceptance.plugin.checker import probe_result
from acceptance.run.cluster_run import ClusterRun
from acceptance.schema.family import Family, Result


def measured(run: ClusterRun, family: Family[Any]) -> Result:
    """The family's probe result, the figures its rule names (``Remeasure.low``) measured again up to the
    times its section allows, the last reading judged."""
    result: Result = probe_result(run, family.name, dict)  # merged below by the figures' names
    rule = family.behaviour.remeasure
    if rule is None:
        return result
    section = family.section_of(run.profile.model)
    times = rule.times(section)
    for n in range(1, times + 1):
        figures = rule.low(result, run.judge.fails, section)
        if not figures:
            break
        why = "out of bounds" if run.baseline is None else "out of bounds or worse than --cluster-baseline"
        run.say(f"{family.name}: {', '.join(figures)} {why}; measuring again ({n} of {times})")
        spec = run.spec(family.name)
        spec[family.name] = rule.spec(cast(JSONObject, spec[family.name]), figures)
        again = probe_result(run, family.name, dict, spec=spec, key=f"{family.name}-again-{n}")
        result = rule.merge(result, again, figures)
    return result
