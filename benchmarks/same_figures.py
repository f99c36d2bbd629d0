"""Every figure of two runs' evidence by name: the names only one run has, and the figures whose verdict
differs. ``python3 benchmarks/same_figures.py OLD NEW`` (evidence folders or files); exits 1 on a difference
in names or verdicts, and prints both runs' counts of gated checks and information."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path


def checks(where: str) -> dict[str, str]:
    path = Path(where)
    doc = json.loads((path / "evidence.json" if path.is_dir() else path).read_text())
    return {c["metric"]: c["verdict"] for t in doc["tests"] for c in t["checks"]}


def main(old_path: str, new_path: str) -> int:
    old, new = checks(old_path), checks(new_path)
    only_old, only_new = sorted(set(old) - set(new)), sorted(set(new) - set(old))
    changed = sorted((m, old[m], new[m]) for m in set(old) & set(new) if old[m] != new[m])
    for name, found in (("old", old), ("new", new)):
        print(f"{name}: {len(found)} figures, verdicts {dict(sorted(Counter(found.values()).items()))}")
    print(f"only in old: {only_old}")
    print(f"only in new: {only_new}")
    print(f"verdict changed: {changed}")
    return 1 if only_old or changed else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
