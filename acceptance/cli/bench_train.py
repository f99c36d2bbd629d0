"""Training benchmark in one command: the suite's training runs for chosen strategies, as a table.

    python -m acceptance.cli.bench_train --profile h200-x2 --strategies ddp,fsdp --set training.compile=model

Runs exactly what ``tests_cluster/test_training.py`` runs (same probe, launcher and profile), every strategy
in one torchrun job, plus the scaling baseline with ``--scaling-baseline``; checks no bound. Evidence (every run's
result, argv and logs) goes to ``--evidence``. The exit status is 1 when a run failed.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import cast

from acceptance.cli.usage import USAGE_ERROR, Parser
from acceptance.evidence.folder import default_folder
from acceptance.evidence.verdict import facts_of
from acceptance.families import training as plan
from acceptance.families.training import TRAINING, report
from acceptance.json_types import JSONObject
from acceptance.profile import loader as profiles
from acceptance.profile.tiers import TIER_NAMES
from acceptance.reports.table import render
from acceptance.run import launcher as launch
from acceptance.run.cluster_run import ClusterRun
from acceptance.run.placement import TopologyError, resolve
from acceptance.run.training_jobs import baseline_run, strategy_runs
from acceptance.schema.figure import Figure
from acceptance.verdicts import decide


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = Parser(prog="python -m acceptance.cli.bench_train", description=__doc__.split("\n")[0])
    parser.add_argument("--profile", default=os.environ.get("CLUSTER_PROFILE", "local-cpu"), help="default: local-cpu")
    parser.add_argument("--strategies", default=None, help="comma-separated (default: the profile's list)")
    parser.add_argument(
        "--tier",
        choices=TIER_NAMES,
        default="burn-in",
        help="whose settings (the profile's tiers:) apply; default burn-in, the full lengths a bound is measured with",
    )
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE", help="profile override"
    )
    # --scaling-baseline, as the profile's training.scaling_baseline: --cluster-baseline (pytest) and compare's
    # baseline are an earlier run's evidence, a different thing; --baseline is kept as a hidden old spelling
    parser.add_argument("--scaling-baseline", action="store_true", help="also run the scaling baseline (default: no)")
    parser.add_argument("--baseline", dest="scaling_baseline", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--evidence", type=Path, default=None, help="default: ./acceptance-results/bench-<time>")
    return parser.parse_args(argv)


# a run's label, its figures or what it failed of, and its wall time in seconds
Outcome = tuple[str, plan.StrategyResult | str, float]


def baseline(cluster: ClusterRun, strategy: str, base: plan.Baseline, runs: dict[str, plan.StrategyResult]) -> Outcome:
    label = f"{strategy} (baseline)"
    try:
        result = baseline_run(cluster, base, strategy, runs)
    except launch.ProbeError as exc:
        return label, str(exc), 0.0
    return label, result, _seconds(result["wall_s"])


def _seconds(value: object) -> float:
    return float(value) if isinstance(value, (int, float)) else 0.0


def measure(cluster: ClusterRun, base: plan.Baseline | str | None) -> list[Outcome]:
    """Every strategy in one job, and the baseline when asked for (in the same job where it can share it):
    (label, figures or error, wall s)."""
    training = TRAINING.section_of(cluster.profile.model)
    found = strategy_runs(cluster, list(training.strategies), base)
    parts = {s: r for s, r in found.items() if s != plan.BASELINE_PART}
    runs: list[Outcome] = [(s, _error(r) or r, _seconds(r.get("wall_s"))) for s, r in parts.items()]
    if isinstance(base, plan.Baseline):
        runs.append(baseline(cluster, training.scaling_strategy, base, found))
    return runs


def _error(result: plan.StrategyResult) -> str | None:
    error = result.get("error")
    return str(error) if error else None


def load(args: argparse.Namespace) -> profiles.Profile:
    """The profile without its bounds (a benchmark checks none), narrowed to ``--strategies``."""
    overrides = ["thresholds=null", *args.overrides]
    prof = profiles.load(args.profile, overrides, args.tier)
    if not args.strategies:
        return prof
    chosen = [s.strip() for s in args.strategies.split(",") if s.strip()]
    overrides.append(f"training.strategies=[{', '.join(chosen)}]")
    if TRAINING.section_of(prof.model).scaling_strategy not in chosen:
        overrides.append(f"training.scaling_strategy={chosen[0]}")
    return profiles.load(args.profile, overrides, args.tier)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        prof = load(args)
        topo = prof.model.topology
        placement = resolve(os.environ, topo.nodes, default_port=topo.rdzv_port)
    except (profiles.ProfileError, TopologyError) as exc:
        print(exc, file=sys.stderr)
        return USAGE_ERROR
    folder = args.evidence or default_folder(f"bench-{prof.name}")
    cluster = ClusterRun(prof, placement, folder, progress=lambda line: print(line, file=sys.stderr, flush=True))
    training = TRAINING.section_of(prof.model)
    base = plan.baseline(training, topo.nproc_per_node, placement.nodes)
    runs = measure(cluster, base if args.scaling_baseline else None)
    # a strategy's result (its TypedDict) is the JSON object its probe wrote, as the report reads it
    done = [(label, cast(JSONObject, result), wall) for label, result, wall in runs if isinstance(result, dict)]
    usd = prof.model.cost.usd_per_gpu_hour if prof.model.cost else None
    print(f"profile {prof.name}, model {training.model}, seq {training.seq_len}, micro-batch {training.micro_batch}")
    print(render(*report.table(done, usd)))
    found = {label: result for label, result, _ in runs if isinstance(result, dict)}
    full, small = found.get(training.scaling_strategy), found.get(f"{training.scaling_strategy} (baseline)")
    if full and small and not isinstance(base, str):
        efficiency = plan.scaling_efficiency(full, small)
        print(f"scaling efficiency ({training.scaling_strategy} vs {base.label}): {efficiency:.3f}")
    failed = [(label, result) for label, result, _ in runs if isinstance(result, str)]
    for label, message in failed:
        print(f"\n{label} FAILED: {message}", file=sys.stderr)
    # a benchmark checks no bound: its verdict says whether every run produced its figures
    errors = [f"{label}: {message.splitlines()[0]}" for label, message in failed]
    for error in errors:
        cluster.evidence.error(error)
    for label, result in found.items():  # recorded as information: a benchmark checks no bound
        metric = f"training.{label.replace(' (baseline)', '_baseline')}.tokens_per_s_per_gpu"
        tokens = cast(float, result["tokens_per_s_per_gpu"])  # the probe writes it as a number
        cluster.check("cluster-acceptance bench_train", Figure(metric, "tokens/s", tokens))
    cluster.evidence.finish(decide(facts_of(cluster.evidence.doc)), complete=True)
    print(f"evidence: {cluster.evidence.write()}")
    cluster.close()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
