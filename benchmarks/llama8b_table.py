"""The reference workload's figures out of one or more runs' evidence, one line per strategy, each beside
NVIDIA's published figure: ``python benchmarks/llama8b_table.py EVIDENCE_FOLDER...``.

Reads only what the suite measured (``evidence.json``'s checks of ``llama8b.<strategy>.<figure>``); the
public figure is the reference table's row (``acceptance/profile/references.yaml``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from acceptance.profile.references import table

FIGURES = ("layers", "tokens_per_s_per_gpu", "mfu", "step_time_s", "step_time_std_s", "peak_mem_gib", "loss_ratio")


def figures(folder: Path) -> dict[str, dict[str, float]]:
    """strategy -> figure -> value, from the checks of one run's evidence; ``layers_of``: the shape's decoder
    layers, from the run's record (its ``model_shape``)."""
    data = json.loads((folder / "evidence.json").read_text())
    found: dict[str, dict[str, float]] = {}
    for test in data["tests"]:
        run = (test.get("measurements") or {}).get("run")
        if isinstance(run, dict) and "model_shape" in run:
            shape = run["model_shape"]
            found.setdefault(str(run["strategy"]), {})["layers_of"] = float(shape.get("layers_of", shape["layers"]))
        for check in test.get("checks") or []:
            family, _, rest = str(check["metric"]).partition(".")
            strategy, _, figure = rest.partition(".")
            if family == "llama8b" and figure in FIGURES and check.get("value") is not None:
                found.setdefault(strategy, {})[figure] = float(check["value"])
    return found


def main(folders: list[str]) -> int:
    reference = next(r for r in table().references if r.figure == "llama8b.fsdp.mfu")
    print(f"reference: {reference.value:.1%} MFU, {reference.basis} ({reference.source})")
    print("run | strategy | layers | tokens/s/GPU | MFU | MFU / reference | step s (std) | peak GiB | loss last/first")
    missing = 0
    for folder in folders:
        runs = figures(Path(folder))
        if not runs:
            print(f"{folder}: no llama8b figure (see its pytest output)")
            missing += 1
        for strategy, f in sorted(runs.items()):
            mfu = f.get("mfu")
            ratio = f"{mfu / reference.value:.2f}" if mfu is not None else "-"
            layers = f"{f.get('layers', float('nan')):.0f} of {f.get('layers_of', float('nan')):.0f}"
            print(
                f"{Path(folder).name} | {strategy} | {layers} | "
                f"{f.get('tokens_per_s_per_gpu', float('nan')):,.0f} | "
                f"{'-' if mfu is None else f'{mfu:.1%}'} | {ratio} | "
                f"{f.get('step_time_s', float('nan')):.3f} ({f.get('step_time_std_s', float('nan')):.3f}) | "
                f"{f.get('peak_mem_gib', float('nan')):.1f} | {f.get('loss_ratio', float('nan')):.3f}"
            )
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
