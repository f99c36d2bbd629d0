#!/usr/bin/env bash
# The causes that are not the node's hardware, on one healthy GPU machine: each must end in review with the
# cause named first and nothing drained, while a GPU really missing still drains. Each case is a fresh pytest
# of the health family and one training test (torch.compile: the compiler matters), under the profile
# `cluster-acceptance init` writes for this node, in the order named (default: all, in this order):
#   healthy    the node as it is: the baseline (health passes; the training test compiles and runs)
#   novisible  CUDA_VISIBLE_DEVICES="" (the job was given no GPU): review, "the job's environment hides GPUs"
#   wrong      a profile for another machine (h200-x4 on an H100, h100-x1 on an H200): review, "wrong profile"
#   nocc       PATH without cc, gcc, g++, c++ or clang, CC and CXX unset: review, "no C/C++ compiler on PATH"
#   foreign    a bf16 matmul loop (benchmarks/matmul_loop.py) on GPU 0 from before the run: review,
#              "foreign load" with its pid
#   missing    the profile asks for one more GPU of this node's own model: drain, category hardware
# e.g. `benchmarks/false_alarms.sh novisible missing`. Each case's pytest output (CASE.txt, with its rc and
# wall), its drain.json (CASE-drain.json) and its verdict line go to $OUT; summary.txt has one line per case:
# the verdict line, then each listed node's severity, category and action and the first words of its reason.
set -uo pipefail
: "${OUT:?set OUT to the folder whose contents come back}"
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
nvidia-smi -L | tee "$OUT/gpus.txt"
model=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
count=$(nvidia-smi -L | wc -l)
case $model in *H200*) other=h100-x1 ;; *) other=h200-x4 ;; esac
python3 -m acceptance.cli init --name node --output "$OUT/node.yaml" > "$OUT/init.txt" 2>&1 || { cat "$OUT/init.txt"; exit 1; }
SELECT=(tests_cluster/test_health.py "tests_cluster/test_training.py::test_tokens_per_s[ddp]")

# a PATH of every command this one has, compilers left out; python by its own path (a virtual environment's
# python started through a link elsewhere would not find its environment)
py=$(command -v python3)
nocc=/tmp/nocc-bin
rm -rf "$nocc" && mkdir -p "$nocc"
IFS=: read -ra dirs <<< "$PATH"
for dir in "${dirs[@]}"; do
  for cmd in "$dir"/*; do
    name=${cmd##*/}
    case $name in
      cc | gcc | g++ | c++ | cpp | clang | clang++ | gcc-* | g++-* | clang-* | clang++-* | *-linux-gnu-*) continue ;;
    esac
    [ -x "$cmd" ] && [ ! -e "$nocc/$name" ] && ln -s "$cmd" "$nocc/$name"
  done
done

for run in "${@:-healthy novisible wrong nocc foreign missing}"; do
  for name in $run; do
    profile=$OUT/node.yaml
    envs=()
    options=()
    loop=
    case $name in
      healthy) ;;
      novisible) envs=(CUDA_VISIBLE_DEVICES=) ;;
      wrong) profile=$other ;;
      nocc) envs=(-u CC -u CXX "PATH=$nocc") ;;
      foreign)
        CUDA_VISIBLE_DEVICES=0 python3 benchmarks/matmul_loop.py 120 > "$OUT/$name-loop.txt" 2>&1 &
        loop=$!
        sleep 10  # the loop's CUDA context and buffers on the GPU before the preflight reads its users
        ;;
      missing) options=(--cluster-set "topology.gpus_per_node=$((count + 1))") ;;
      *) echo "unknown case $name (healthy, novisible, wrong, nocc, foreign, missing)" >&2; exit 4 ;;
    esac
    start=$(date +%s.%N)
    timeout 300 env "${envs[@]}" "$py" -m pytest -p no:cacheprovider --cluster-profile "$profile" "${SELECT[@]}" \
      "${options[@]}" --cluster-evidence "$OUT/ev-$name" > "$OUT/$name.txt" 2>&1
    echo "rc=$? wall=$(python3 -c "import time; print(round(time.time() - $start, 1))")" >> "$OUT/$name.txt"
    [ -n "$loop" ] && kill "$loop" 2> /dev/null && wait "$loop" 2> /dev/null
    cp "$OUT/ev-$name/drain.json" "$OUT/$name-drain.json" 2> /dev/null
    verdict=$(grep -E "^verdict:" "$OUT/$name.txt" | tail -1)
    listed=$(python3 -c "
import json, sys
try:
    nodes = json.load(open(sys.argv[1]))['nodes']
except OSError:
    nodes = []
print('; '.join(f\"{n['node']}: {n['severity']}, {n['category']}, {n['action']}: {n['reasons'][0]['text'][:90]}\" for n in nodes) or 'no drain list')
" "$OUT/$name-drain.json")
    echo "== $name ($(tail -1 "$OUT/$name.txt")): $verdict | $listed" | tee -a "$OUT/summary.txt"
  done
done
cd "$OUT" && tar czf ev.tgz ev-* && rm -rf ev-* && ls -la
