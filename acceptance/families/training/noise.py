"""The noise of a stored training figure: a strategy's tokens/s over its timed windows (or, in evidence from
before the windows were kept, their quartiles), and the scaling efficiency from two such runs."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from acceptance.families.training.figures import DEFAULT_WINDOWS
from acceptance.schema.noise import Noise, at, combined, log_noise, quartile_noise
from acceptance.schema.stored import StoredRun


def _runs(evidence: StoredRun, baseline: bool) -> Iterator[Mapping[str, object]]:
    """Every training run of the evidence with its strategy's name: the strategies of one training job
    (``strategies``, the scaling baseline as ``scaling-baseline``), or, in older evidence, one probe per
    strategy (``training-<strategy>``, the baseline ``training-baseline``)."""
    for probe in evidence.probes:
        result = probe.result
        if probe.name != "training" or probe.status != "ok" or not isinstance(result, Mapping):
            continue
        older = probe.key.endswith("-baseline")
        strategies = result.get("strategies") or {"": result}
        for name, run in strategies.items() if isinstance(strategies, Mapping) else ():
            if isinstance(run, Mapping) and (name == "scaling-baseline" or older) == baseline:
                yield {**run, "strategy": run.get("strategy") or name}


def _tokens(evidence: StoredRun, strategy: str, baseline: bool = False) -> Noise | None:
    """A strategy's tokens/s: the median over its timed windows (``training.windows``)."""
    for run in _runs(evidence, baseline):
        if run.get("strategy") != strategy:
            continue
        windows = run.get("windows")
        if isinstance(windows, list) and windows:
            rates = [at(w, "tokens_per_s") for w in windows if isinstance(w, Mapping)]
            return log_noise(rates, f"{len(rates)} timed windows")
        found = at(evidence.profile.resolved, "training", "windows")
        count = int(found) if isinstance(found, (int, float)) and found else DEFAULT_WINDOWS
        q1, q3 = run.get("tokens_per_s_per_gpu_q1"), run.get("tokens_per_s_per_gpu_q3")
        return quartile_noise(q1, q3, count, f"the quartiles of {count} timed windows")
    return None


def noise(evidence: StoredRun, parts: list[str], size: str) -> Noise | None:
    """The noise of ``training.<strategy>.tokens_per_s_per_gpu`` and of ``training.scaling_efficiency``."""
    if parts == ["scaling_efficiency"]:
        strategy = str(at(evidence.profile.resolved, "training", "scaling_strategy") or "ddp")
        return combined(_tokens(evidence, strategy), _tokens(evidence, strategy, baseline=True))
    if len(parts) == 2 and parts[1] == "tokens_per_s_per_gpu" and not size:
        return _tokens(evidence, parts[0])
    return None
