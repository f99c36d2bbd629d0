#!/usr/bin/env bash
# benchmarks/compile_start.py's ways one after another on this machine's GPUs, each with fresh TorchInductor and
# Triton caches (WAYS, default "plain prewarm first eager"; THREADS, TorchInductor's compile threads per rank,
# "" for its default). "warm:WAY" runs WAY again on the caches of the last run of WAY. Output in $OUT/compile.txt.
set -uo pipefail
: "${OUT:?set OUT to the folder whose contents come back}"
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
gpus=$(nvidia-smi -L | wc -l)
n=0
for way in ${WAYS:-plain prewarm first eager}; do
  n=$((n + 1))
  case $way in
    warm:*) way=${way#warm:}; cache=/tmp/cache-$way ;;
    *) cache=/tmp/cache-$way; rm -rf "$cache" ;;
  esac
  threads=${THREADS:-}
  case $way in *@*) threads=${way#*@}; way=${way%@*}; cache=$cache ;; esac
  start=$(date +%s.%N)
  env ${threads:+TORCHINDUCTOR_COMPILE_THREADS=$threads} TORCHINDUCTOR_CACHE_DIR="$cache/inductor" \
    TRITON_CACHE_DIR="$cache/triton" python3 -m torch.distributed.run --standalone --nproc-per-node="$gpus" \
    benchmarks/compile_start.py "$way" > "$OUT/compile-$n.txt" 2>&1
  echo "== $n $way threads=${threads:-default} rc=$? wall=$(python3 -c "import time; print(round(time.time() - $start, 1))") torchrun_exit_at=$(date +%s.%N)" | tee -a "$OUT/compile.txt"
  grep -o '{"way.*\|{"rank.*' "$OUT/compile-$n.txt" | python3 -c "
import json, sys
for line in sys.stdin:
    try:
        d = json.loads(line)
    except ValueError:
        continue  # two ranks' lines interleaved
    c = d.pop('compile', None)
    print(json.dumps(d))
    if c and d['rank'] == 0: print(c)
" >> "$OUT/compile.txt"
  tail -3 "$OUT/compile-$n.txt" | grep -i error >> "$OUT/compile.txt"
done
tar czf "$OUT/logs.tgz" -C "$OUT" $(cd "$OUT" && ls compile-*.txt) && rm -f "$OUT"/compile-*.txt
cat "$OUT/compile.txt"
