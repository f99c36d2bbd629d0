#!/usr/bin/env bash
# nccl-tests beside the suite's collectives on this machine's GPUs: nccl-tests 2.19 built here from
# .gpu/nccl-tests (a `git archive` of NVIDIA/nccl-tests, carried with the tree: it is git-ignored), run one GPU
# per thread (-t N -g 1, as clusters run it: one rank per GPU) for every op, bf16, -w 5 -n 20 (the suite's
# warm-up and timed calls), -b 8 -e 4G -f $STEP, once as clusters run it and once with -I 1 (per-iteration p99
# and CV); then, in the same call, `cluster-acceptance sweep` over the same sizes with each timing named in
# TIMINGS (default: auto, the gated figure, then cuda_graph); then one side-by-side table per timing
# (nccltests_table.py): ratio of nccl-tests' time to ours, flagged outside 0.95-1.05 from 1 MiB and 0.9-1.1 below.
# e.g. `benchmarks/nccltests.sh` (about 3 minutes on 2x H200). NGPUS: default every GPU; STEP: default 2
# (-f 2 reaches 4G; -f 8 stops at 1G: 8 * 8^9); MAXBYTES (-e): default 4G; WARMUP, ITERS (-w, -n): default
# 5 and 20; REPEATS: each side run this many times, alternating (run r's files end in -r), for how far each
# side moves from one run to the next on the same machine (nccltests_repeat.py).
[ -n "${OUT:-}" ] || { echo "OUT: name an empty folder for what the runs write" >&2; exit 2; }
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 PYTHONPATH=/tmp/site:$PWD
nvidia-smi -L
NGPUS=${NGPUS:-$(nvidia-smi -L | wc -l)}
STEP=${STEP:-2}
GPUS=$(seq -s, 0 $((NGPUS - 1)))
export CUDA_VISIBLE_DEVICES=$GPUS
OPS=(all_reduce all_gather reduce_scatter alltoall broadcast sendrecv)

build() {  # nccl-tests against torch's own NCCL (/work/shared/gpu/README.md), into /tmp/nccl-tests
  [ -x /tmp/nccl-tests/build/sendrecv_perf ] && return 0
  [ -f .gpu/nccl-tests/src/common.cu ] || { echo "no .gpu/nccl-tests: carry a git archive of NVIDIA/nccl-tests" >&2; return 1; }
  local nccl home=/tmp/nccl-home start; start=$(date +%s)
  nccl=$(python3 -c "import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__) if nvidia.nccl.__file__ else list(nvidia.nccl.__path__)[0])")
  mkdir -p $home/lib && ln -sfn "$nccl/include" $home/include && ln -sf "$nccl/lib/libnccl.so.2" $home/lib/libnccl.so.2 \
    && ln -sf libnccl.so.2 $home/lib/libnccl.so || return 1
  rm -rf /tmp/nccl-tests && cp -r .gpu/nccl-tests /tmp/nccl-tests
  make -C /tmp/nccl-tests -j16 MPI=0 CUDA_HOME=/usr/local/cuda NCCL_HOME=$home \
    NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" > "$OUT/build.txt" 2>&1 || { tail -20 "$OUT/build.txt"; return 1; }
  echo "== nccl-tests built in $(( $(date +%s) - start )) s ($(grep -m1 -o 'NCCL_TESTS_VERSION.*' /tmp/nccl-tests/src/*.h /tmp/nccl-tests/Makefile 2>/dev/null | head -1))"
}

compare() {
  build || return 1
  export LD_LIBRARY_PATH=/tmp/nccl-home/lib:${LD_LIBRARY_PATH:-}
  local r sfx w=${WARMUP:-5} n=${ITERS:-20} e=${MAXBYTES:-4G}
  for r in $(seq 1 "${REPEATS:-1}"); do
    sfx=$([ "${REPEATS:-1}" -gt 1 ] && echo "-$r")
    mkdir -p "$OUT/nccl-tests$sfx" "$OUT/nccl-tests-I$sfx"
    local flags=(-t "$NGPUS" -g 1 -b 8 -e "$e" -f "$STEP" -d bfloat16 -w "$w" -n "$n") start=$(date +%s)
    for op in "${OPS[@]}"; do
      timeout 120 /tmp/nccl-tests/build/${op}_perf "${flags[@]}" > "$OUT/nccl-tests$sfx/$op.txt" 2>&1
      timeout 120 /tmp/nccl-tests/build/${op}_perf "${flags[@]}" -I 1 > "$OUT/nccl-tests-I$sfx/$op.txt" 2>&1
      echo "== nccl-tests $op rc=$?: $(grep -c '^ ' "$OUT/nccl-tests$sfx/$op.txt") rows"
    done
    echo "== nccl-tests: $(( $(date +%s) - start )) s"
    local timing
    for timing in ${TIMINGS:-auto cuda_graph}; do
      start=$(date +%s)
      timeout 300 python3 -m acceptance.cli.main sweep -b 8 -e "$e" -f "$STEP" --dtype bfloat16 -w "$w" -n "$n" \
        --timeout 280 --timing "$timing" --ops all_reduce,all_gather,reduce_scatter,all_to_all,broadcast,sendrecv \
        --evidence "$OUT/sweep-$timing$sfx" > "$OUT/sweep-$timing$sfx.txt" 2>&1
      echo "== sweep --timing $timing rc=$? in $(( $(date +%s) - start )) s"; tail -3 "$OUT/sweep-$timing$sfx.txt"
      python3 benchmarks/nccltests_table.py "$OUT/nccl-tests$sfx" "$OUT/sweep-$timing$sfx" \
        --per-iter "$OUT/nccl-tests-I$sfx" > "$OUT/table-${NGPUS}gpu-$timing$sfx.md"
      tail -1 "$OUT/table-${NGPUS}gpu-$timing$sfx.md"
    done
  done
}

compare
cd "$OUT" && tar czf r.tgz --exclude='*.tgz' ./* 2> /dev/null; ls
