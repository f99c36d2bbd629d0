#!/usr/bin/env bash
# The collectives' spread rule on one GPU machine (collectives.late_ranks): healthy runs, then a GPU slowed by
# another process.
#
#   benchmarks/spread.sh PROFILE [STEP...]
#
# PROFILE: a GPU profile of two GPUs or more (h200-x2). STEPS (default: healthy slowed), in the order given:
#   healthy  the collectives family (pytest -m collectives) RUNS times (default 5): late_ranks must be 0 each time
#   slowed   the family again, with a bf16 matmul loop (benchmarks/matmul_loop.py) on GPU 1 started DELAY seconds
#            in (default 15: after the preflight, which would name the process and stop the run, before the
#            sweep): the loop's process named as the cause (late_ranks read 1 case of 16 for rank 1 on 2x H200:
#            a GPU time-sliced with another process is named by the sweep's GPU sampler, not by lateness)
#   cpushared  the family again, rank 1's processes (RANK=1 in their environment) pinned to one core DELAY seconds
#            in, with two busy loops on that core: late_ranks must name rank 1
# Each run's output and evidence go under $OUT (<name>.txt, ev-<name>/); after each run, its late_ranks line and
# every rank's lateness p99 per op and size of the spread pass are printed.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 PROFILE [healthy|slowed ...]" >&2; exit 4; }
profile=$1
shift
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(healthy slowed)
: "${OUT:?set OUT to the folder whose contents come back}"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
nvidia-smi -L | tee "$OUT/gpus.txt"

family() {  # family NAME: one run of the collectives family
  local name=$1 rc=0 start
  start=$(date +%s)
  timeout 420 python3 -m pytest -p no:cacheprovider -m collectives tests_cluster/ --cluster-profile "$profile" \
    --cluster-evidence "$OUT/ev-$name" > "$OUT/$name.txt" 2>&1 || rc=$?
  echo "rc=$rc wall=$(($(date +%s) - start)) s" >> "$OUT/$name.txt"
  echo "== $name: $(tail -1 "$OUT/$name.txt")"
  grep -E "^collectives.late_ranks|^verdict" "$OUT/$name.txt" || true
  python3 - "$OUT/ev-$name/evidence.json" <<'PY' || echo "  (no spread figures: the run wrote no evidence)"
import json, sys
doc = json.load(open(sys.argv[1]))
for test in doc["tests"]:
    for check in test["checks"]:
        if check["metric"] == "collectives.late_ranks":
            print("  " + check.get("detail", "").replace("\n", "\n  "))
    found = test["measurements"].get("sweep", {}).get("spread", [])
    for s in found:
        p99s = ", ".join(f"{r['lateness_p99_us']:.1f}" for r in s["ranks"])
        print(f"  {s['op']:>14} {s['size']:>4}: lateness p99 per rank [{p99s}] us")
PY
}

for step in "${steps[@]}"; do
  case $step in
    healthy)
      for i in $(seq 1 "${RUNS:-5}"); do family "healthy$i"; done ;;
    slowed)
      (sleep "${DELAY:-15}" && CUDA_VISIBLE_DEVICES=1 exec python3 benchmarks/matmul_loop.py 300) > "$OUT/loop.txt" 2>&1 &
      loop=$!
      family slowed
      kill "$loop" 2>/dev/null || true
      wait || true ;;
    cpushared)
      (
        sleep "${DELAY:-15}"
        core=$(( $(nproc) - 1 ))
        for env in /proc/[0-9]*/environ; do
          pid=${env#/proc/}; pid=${pid%/environ}
          tr '\0' '\n' 2>/dev/null < "$env" | grep -qx 'RANK=1' || continue
          grep -q python /proc/"$pid"/cmdline 2>/dev/null && taskset -a -p -c "$core" "$pid" > /dev/null && echo "pinned $pid to core $core"
        done
        # two busy loops on that core, ended with this subshell (their own pids: nothing else is matched)
        loops=()
        for _ in 1 2; do taskset -c "$core" timeout 120 python3 -c 'while True: pass' & loops+=($!); done
        trap 'kill "${loops[@]}" 2>/dev/null' TERM EXIT
        wait
      ) > "$OUT/hog.txt" 2>&1 &
      hog=$!
      family cpushared
      kill "$hog" 2>/dev/null || true
      wait || true
      cat "$OUT/hog.txt" ;;
    *) echo "unknown step $step" >&2; exit 4 ;;
  esac
done
cd "$OUT" && tar czf ev.tgz --exclude='*.tgz' ev-* && ls
