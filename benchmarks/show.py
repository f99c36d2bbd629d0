"""What a suite's evidence says of training memory and of the timed windows' spread (collectives, per-GPU figures)."""

import json
import sys
from pathlib import Path

ev = json.loads((Path(sys.argv[1]) / "evidence.json").read_text())
print("verdict", ev["verdict"], "complete", ev["complete"])
for p in ev["probes"]:
    res = p.get("result") or {}
    if p["name"] == "training":
        for name, r in (res.get("strategies") or {}).items():
            spread = 100 * (r.get("tokens_per_s_per_gpu_spread") or 0)
            print(
                f"  {name:16} tok/s {r.get('tokens_per_s_per_gpu', 0):9,.0f} spread {spread:4.1f}% "
                f"peak {r.get('peak_mem_gib', 0):5.1f} held_at_start {r.get('held_at_start_gib')} "
                f"held_after {r.get('held_after_teardown_gib')} wall {r.get('wall_s')}"
            )
    if p["name"] == "collectives":
        for r in res.get("rows", []):
            if r["size"] in ("1M", "64M", "1G", "4G"):
                w = [round(x, 1) for x in r.get("busbw_windows_gbps") or []]
                print(
                    f"  {r['op']:15} {r['size']:4} busbw {r['busbw_gbps']:7.1f} time {r['time_us']:9.1f} us "
                    f"spread {100 * r.get('window_spread', 0):4.1f}% windows {w}"
                )
    if p["name"] == "compute":
        for r in res.get("rows", []):
            figures = {k: round(v, 1) for k, v in r.items() if k.endswith(("tflops", "gbps")) and isinstance(v, float)}
            windows = {k: [round(x, 1) for x in v] for k, v in (r.get("windows") or {}).items()}
            print("  gpu", r.get("gpu"), figures, windows)
