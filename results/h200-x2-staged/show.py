"""What a suite's evidence says about the figures this stop changed: training memory, windows' spreads."""
import json, sys
from pathlib import Path
ev = json.loads((Path(sys.argv[1]) / "evidence.json").read_text())
print("verdict", ev["verdict"], "complete", ev["complete"])
for p in ev["probes"]:
    res = p.get("result") or {}
    if p["name"] == "training":
        for name, r in (res.get("strategies") or {}).items():
            print(f"  {name:16} tok/s {r.get('tokens_per_s_per_gpu', 0):9,.0f} spread {100*(r.get('tokens_per_s_per_gpu_spread') or 0):4.1f}% "
                  f"peak {r.get('peak_mem_gib', 0):5.1f} held_at_start {r.get('held_at_start_gib')} held_after {r.get('held_after_teardown_gib')} wall {r.get('wall_s')}")
    if p["name"] == "collectives":
        for r in res.get("rows", []):
            if r["size"] in ("1M", "64M", "1G", "4G"):
                w = r.get("busbw_windows_gbps") or []
                print(f"  {r['op']:15} {r['size']:4} busbw {r['busbw_gbps']:7.1f} time {r['time_us']:9.1f} us spread {100*r.get('window_spread', 0):4.1f}% windows {[round(x,1) for x in w]}")
    if p["name"] == "compute":
        for r in res.get("rows", []):
            print("  gpu", r.get("gpu"), {k: round(v, 1) for k, v in r.items() if k.endswith(("tflops", "gbps")) and isinstance(v, float)},
                  {k: [round(x, 1) for x in v] for k, v in (r.get("windows") or {}).items()})
