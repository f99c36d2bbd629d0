#!/usr/bin/env bash
# A job's share of a 4-GPU node, as Slurm's GRES or Kubernetes' device plugin gives it (CUDA_VISIBLE_DEVICES):
#   pair    two runs of the 2-GPU profile at the same time, on GPUs 0,1 and 2,3 (each its own rendezvous port
#           and evidence folder): each judges its own two GPUs, neither names nor drains the other's
#   foreign one run on GPUs 0,1 with a bf16 matmul loop (matmul_loop.py) started on GPU 1 DELAY seconds in
#           (default 25: after the preflight, before the per-GPU figures): its figures name the process
# e.g. `benchmarks/share.sh pair foreign`. PROFILE: default h200-x2 on H200s, h100-x1 (2 GPUs) on H100s.
[ -n "${OUT:-}" ] || { echo "OUT: name an empty folder for what the runs write" >&2; exit 2; }
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 PYTHONPATH=/tmp/site:$PWD
nvidia-smi -L
if [ -z "${PROFILE:-}" ]; then
  if nvidia-smi -L | grep -q H200; then PROFILE=h200-x2; SET=(); else PROFILE=h100-x1; SET=(--cluster-set topology.gpus_per_node=2); fi
else SET=(); fi
suite() {  # NAME GPUS PORT: one run of the default suite on those GPUs
  local start; start=$(date +%s.%N)
  CUDA_VISIBLE_DEVICES=$2 timeout 420 python3 -m pytest -p no:cacheprovider --cluster-profile "$PROFILE" tests_cluster/ \
    "${SET[@]}" --cluster-set "topology.rdzv_port=$3" --cluster-evidence "$OUT/$1" > "$OUT/$1.txt" 2>&1
  echo "rc=$? wall=$(python3 -c "import time; print(round(time.time() - $start, 1))")" >> "$OUT/$1.txt"
}
report() {  # NAME: the verdict, the counts, the GPU count's line and the drain list
  echo "== $1 (CUDA_VISIBLE_DEVICES=$2): $(tail -1 "$OUT/$1.txt")"
  grep -E "^checks:|^verdict:|^drain" "$OUT/$1.txt"
  python3 - "$OUT/$1" <<'PY'
import json, sys
from pathlib import Path
folder = Path(sys.argv[1])
ev = json.loads((folder / "evidence.json").read_text())
for t in ev["tests"]:
    for c in t["checks"]:
        if c["metric"] == "health.gpu_count" or c["verdict"] in ("fail", "baseline_fail"):
            print(f"  {c['metric']} = {c['value']} [{c['verdict']}] {c.get('detail', '')[:600]}")
    if t.get("category"):
        print(f"  {t['nodeid']}: category {t['category']}")
drain = folder / "drain.json"
if drain.exists():
    for n in json.loads(drain.read_text())["nodes"]:
        print(f"  drain.json: {n['node']} {n['severity']} node_fault={n.get('node_fault')} {n.get('category')} "
              f"{n.get('action')} gpus={n.get('gpus')}")
else:
    print("  no drain.json")
PY
}
for step in "$@"; do
  case $step in
    pair)
      suite pair01 0,1 29400 & suite pair23 2,3 29500 & wait
      report pair01 0,1; report pair23 2,3 ;;
    foreign)
      (sleep "${DELAY:-25}" && CUDA_VISIBLE_DEVICES=1 exec python3 benchmarks/matmul_loop.py 150) > "$OUT/loop.txt" 2>&1 &
      suite foreign01 0,1 29600; wait
      report foreign01 0,1 ;;
  esac
done
cd "$OUT" && tar czf share.tgz --exclude='*.tgz' ./* && ls
