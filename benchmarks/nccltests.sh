#!/usr/bin/env bash
# nccl-tests beside the suite's collectives on this machine's GPUs, in the steps named, in order:
#   compare  nccl-tests 2.19 built here from .gpu/nccl-tests (a `git archive` of NVIDIA/nccl-tests, carried with
#            the tree: it is git-ignored), run one GPU per thread (-t N -g 1, as clusters run it: one rank per
#            GPU) for every op, bf16, -w 5 -n 20 (the suite's warm-up and timed calls), -b 8 -e 4G -f $STEP,
#            once as clusters run it and once with -I 1 (per-iteration p99 and CV); then, in the same call,
#            `cluster-acceptance sweep` over the same sizes; then the side-by-side table (nccltests_table.py):
#            ratio of nccl-tests' time to ours, flagged outside 0.95-1.05 from 1 MiB and 0.9-1.1 below
#   spread   the suite's collectives family (pytest on $PROFILE, the sweep only) $RUNS times healthy, then once
#            with a bf16 matmul loop (matmul_loop.py) on the last GPU started once the sweep's ranks are up;
#            prints collectives.rank_p99_ratio and rank_cv_excess of each run and whether the slowed run named
#            the last GPU's rank (nccltests_spread.py)
# e.g. `benchmarks/nccltests.sh compare spread` (about 6 minutes on 4x H200). NGPUS: default every GPU;
# STEP: default 2 (-f 8 stops at 1G: 8 * 8^9; -f 2 reaches 4G); RUNS: default 5; PROFILE: default h200-x2 on
# H200s, h100-x1 otherwise (its topology set to NGPUS here).
[ -n "${OUT:-}" ] || { echo "OUT: name an empty folder for what the runs write" >&2; exit 2; }
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 PYTHONPATH=/tmp/site:$PWD
ca() { python3 -m acceptance.cli.main "$@"; }
nvidia-smi -L
NGPUS=${NGPUS:-$(nvidia-smi -L | wc -l)}
STEP=${STEP:-2}
RUNS=${RUNS:-5}
if nvidia-smi -L | head -1 | grep -q H200; then PROFILE=${PROFILE:-h200-x2}; else PROFILE=${PROFILE:-h100-x1}; fi
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
  mkdir -p "$OUT/nccl-tests" "$OUT/nccl-tests-I"
  local flags=(-t "$NGPUS" -g 1 -b 8 -e 4G -f "$STEP" -d bfloat16 -w 5 -n 20) start=$(date +%s)
  for op in "${OPS[@]}"; do
    timeout 120 /tmp/nccl-tests/build/${op}_perf "${flags[@]}" > "$OUT/nccl-tests/$op.txt" 2>&1
    timeout 120 /tmp/nccl-tests/build/${op}_perf "${flags[@]}" -I 1 > "$OUT/nccl-tests-I/$op.txt" 2>&1
    echo "== nccl-tests $op rc=$?: $(grep -c '^ ' "$OUT/nccl-tests/$op.txt") rows"
  done
  echo "== nccl-tests: $(( $(date +%s) - start )) s"; start=$(date +%s)
  timeout 300 python3 -m acceptance.cli.main sweep -b 8 -e 4G -f "$STEP" --dtype bfloat16 -w 5 -n 20 --timeout 280 \
    --ops all_reduce,all_gather,reduce_scatter,all_to_all,broadcast,sendrecv --evidence "$OUT/sweep" > "$OUT/sweep.txt" 2>&1
  echo "== sweep rc=$? in $(( $(date +%s) - start )) s"; tail -3 "$OUT/sweep.txt"
  python3 benchmarks/nccltests_table.py "$OUT/nccl-tests" "$OUT/sweep" --per-iter "$OUT/nccl-tests-I" \
    | tee "$OUT/table-${NGPUS}gpu.md"
}

suite() {  # NAME: the collectives family alone (the sweep and the spread rule) on $PROFILE over NGPUS GPUs
  local name=$1 start; start=$(date +%s)
  timeout 240 python3 -m pytest -p no:cacheprovider --cluster-profile "$PROFILE" tests_cluster/test_collectives.py \
    -k "rank_spread or sweep_complete" --cluster-set "topology.gpus_per_node=$NGPUS" --cluster-set "thresholds=null" \
    --cluster-set 'collectives.ops=["all_reduce","all_gather","reduce_scatter","all_to_all","broadcast","sendrecv"]' \
    --cluster-set 'collectives.sizes=["8","64","512","4K","32K","256K","2M","16M","128M"]' \
    --cluster-evidence "$OUT/$name" > "$OUT/$name.txt" 2>&1
  echo "rc=$? wall=$(( $(date +%s) - start ))" >> "$OUT/$name.txt"
  echo "== $name: $(tail -1 "$OUT/$name.txt")"
}

spread() {
  local n
  for n in $(seq 1 "$RUNS"); do suite "healthy$n"; python3 benchmarks/nccltests_spread.py "$OUT/healthy$n"; done
  # the loop starts once the sweep's probe folder exists (after the preflight, which refuses a GPU in use)
  (for _ in $(seq 1 600); do ls -d "$OUT"/slowed/probes/*collectives* > /dev/null 2>&1 && break; sleep 0.2; done
   CUDA_VISIBLE_DEVICES=$((NGPUS - 1)) exec python3 benchmarks/matmul_loop.py 90) > "$OUT/loop.txt" 2>&1 &
  local loop=$!
  trap 'kill "$loop" 2> /dev/null' EXIT  # the script ended early (its time ran out): the loop ends with it
  suite slowed
  kill "$loop" 2> /dev/null; wait "$loop" 2> /dev/null
  python3 benchmarks/nccltests_spread.py "$OUT/slowed" --slowed-rank $((NGPUS - 1))
}

for step in "$@"; do
  case $step in
    compare) compare ;;
    spread) spread ;;
    *) echo "unknown step $step (compare, spread)" >&2 ;;
  esac
done
cd "$OUT" && tar czf r.tgz --exclude='*.tgz' ./* 2> /dev/null; ls
