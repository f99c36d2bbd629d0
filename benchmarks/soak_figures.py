"""The soak's figures per GPU from a run's evidence, and gpu-burn's beside them where its output is given.

python3 benchmarks/soak_figures.py EVIDENCE_DIR [GPU_BURN_OUTPUT]   (EVIDENCE_DIR "-": gpu-burn's alone)
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any, cast

from acceptance.families import soak as rules
from acceptance.families.answers import clock_events_text
from acceptance.numbers import fmt


def _f(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def soak_result(folder: Path) -> rules.SoakResult | None:
    evidence = json.loads((folder / "evidence.json").read_text())
    print(f"{folder}: verdict {evidence['verdict']}, complete {evidence['complete']}")
    found = [p.get("result") for p in evidence["probes"] if p["name"] == "soak" and p.get("result")]
    for test in evidence["tests"]:
        for c in test.get("checks", []):
            if c["metric"].startswith("soak."):
                print(f"  {c['metric']:32} {c['value']:>12.6g} {c['unit']:9} {c['verdict']}")
    return cast(rules.SoakResult, found[-1]) if found else None


def print_gpus(result: rules.SoakResult) -> None:
    print(f"soak of {result['config']['duration_s']:g} s, matmul {result['config']['matmul_size']}^3")
    for line in rules.table(result):
        print(f"  {line['gpu']}")
        for dtype, value in line["tflops"].items():
            first, last = line["first_minute"].get(dtype), line["last_minute"].get(dtype)
            node, cluster = line["below_node_median"].get(dtype, 0.0), line["below_cluster_median"].get(dtype, 0.0)
            print(
                f"    {dtype:14} sustained {fmt(value)} TFLOP/s, first minute {fmt(first)}, last {fmt(last)}; "
                f"under the node median {node:.1%}, the cluster median {cluster:.1%}"
            )
        print(
            f"    steady: {_f(line['steady_temp_c'], 0)} °C GPU, {_f(line['steady_mem_temp_c'], 0)} °C memory, "
            f"{_f(line['steady_power_w'], 0)} W, SM {_f(line['steady_sm_mhz'], 0)} MHz; first slowdown "
            f"{_f(line['first_slowdown_s'], 0)} s, first power cap {_f(line['first_power_cap_s'], 0)} s"
        )
        print(f"    clock events: {clock_events_text(line['clock_events'])}")
    for r in result["ranks"]:
        done = ", ".join(
            f"{x['dtype']} {x['calls']} calls {x['wrong_elements']} wrong" for x in r["gemm"] if x["calls"]
        )
        m, a = r["memory"], r["allreduce"]
        print(
            f"  {rules.label(r)}: {r['rounds']} rounds; {done}; memory {m['bytes'] / 2**30:.1f} GiB x {m['passes']} "
            f"passes, {m['bad_words']} bad; all_reduce {a['iterations']} x {a['elements']:,}, {a['wrong']} wrong"
        )
    for said in result["injected"]:
        print(f"  injected: {said}")


def print_gpu_burn(output: Path) -> None:
    """gpu-burn's last progress line (``proc'd: N (X Gflop/s) ... errors: E ...``) and its verdict per GPU."""
    text = output.read_text(errors="replace").replace("\r", "\n")
    progress = [line for line in text.splitlines() if "Gflop/s" in line]
    print(f"gpu-burn ({output}):")
    if progress:
        last = progress[-1]
        gflops = re.findall(r"\(([\d.]+) Gflop/s\)", last)
        errors = re.search(r"errors:\s*(.*?)\s*temps:", last)
        print(f"  last progress line: {last.strip()}")
        print(f"  Gflop/s per GPU: {', '.join(gflops)}; errors: {errors.group(1) if errors else '?'}")
    for line in text.splitlines():
        if re.match(r"\s*GPU \d+: (OK|FAULTY)", line):
            print(f"  {line.strip()}")


def main(argv: list[str]) -> int:
    result = soak_result(Path(argv[1])) if argv[1] != "-" else None
    if result is not None:
        print_gpus(result)
    if len(argv) > 2:
        print_gpu_burn(Path(argv[2]))
    return 0


if __name__ == "__main__":
    sys.exit(main(cast(Any, sys.argv)))
