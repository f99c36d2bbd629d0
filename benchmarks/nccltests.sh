#!/usr/bin/env bash
# nccl-tests beside the suite's collectives on this machine's GPUs: nccl-tests 2.19 built here from
# .gpu/nccl-tests (a `git archive` of NVIDIA/nccl-tests, carried with the tree: it is git-ignored), run one GPU
# per thread (-t N -g 1, as clusters run it: one rank per GPU) for every op, bf16, -w 5 -n 20 (the suite's
# warm-up and timed calls), -b 8 -e 4G -f $STEP, once as clusters run it and once with -I 1 (per-iteration p99
# and CV); then, in the same call, `cluster-acceptance sweep` over the same sizes with each timing named in
# TIMINGS (default: auto, the gated figure, then cuda_graph); then one side-by-side table per timing
# (nccltests_table.py): ratio of nccl-tests' time to ours, flagged outside 0.95-1.05 from 1 MiB and 0.9-1.1 below.
# LAYOUTS: "threads" (default: -t N -g 1, one process), "mpi" (mpirun -np N -g 1: one process per GPU, the suite's
# own layout; built where the machine has MPI), or both; one table per layout.
# e.g. `benchmarks/nccltests.sh` (about 3 minutes on 2x H200). NGPUS: default every GPU; STEP: default 2
# (-f 2 reaches 4G; -f 8 stops at 1G: 8 * 8^9); MAXBYTES (-e): default 4G; WARMUP, ITERS (-w, -n): default
# 5 and 20; MINBYTES (-b): default 8; OPS: nccl-tests' programs to run, default every op (e.g. OPS=alltoall);
# REPEATS: each side run this many times, alternating (run r's files end in -r), for how far each side moves
# from one run to the next on the same machine (nccltests_repeat.py) and the medians of the runs side by side
# (sidebyside_medians.py).
# `benchmarks/nccltests.sh loop`: what the direct loop's time is made of (nccl_loop_ab.py, ops LOOP_OPS at
# LOOP_SIZES) beside nccl-tests at -n 20 and -n 200 over 8 B-4 MiB, one GPU per thread and, where the machine
# has MPI, one process per GPU (mpirun), each LOOP_RUNS times (default 3; LOOP_NCCL_TESTS=0: the loop's variants
# alone). PER_ITER=0: no -I 1 run of nccl-tests.
# `benchmarks/nccltests.sh placement`: whether where the processes run moves the small sizes: for each CPU set
# in PLACES ("all": every CPU this process may use, "low": the first half of them, "high": the second half; a
# hardware thread is a CPU), PLACE_RUNS times (default 3, the sets alternating), nccl-tests one GPU per thread
# and, where the machine has MPI, under MPI, and the suite's sweep, each started under `taskset -c SET`, ops OPS
# at -b 8 -e PLACE_MAX (default 64K) -f 4 -w 20 -n 200; then per set the medians of its runs side by side
# (sidebyside_medians.py OUT/place-SET, and --between for the first two sets), with the machine's CPU and NUMA
# layout.
[ -n "${OUT:-}" ] || { echo "OUT: name an empty folder for what the runs write" >&2; exit 2; }
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 PYTHONPATH=/tmp/site:$PWD
nvidia-smi -L
NGPUS=${NGPUS:-$(nvidia-smi -L | wc -l)}
STEP=${STEP:-2}
GPUS=$(seq -s, 0 $((NGPUS - 1)))
export CUDA_VISIBLE_DEVICES=$GPUS
read -r -a OPS <<< "${OPS:-all_reduce all_gather reduce_scatter alltoall broadcast sendrecv}"
SUITE_OPS=$(printf '%s\n' "${OPS[@]}" | sed 's/^alltoall$/all_to_all/' | paste -sd,)

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
  local r sfx w=${WARMUP:-5} n=${ITERS:-20} b=${MINBYTES:-8} e=${MAXBYTES:-4G}
  local layouts=${LAYOUTS:-threads} layout mpi=0
  [[ $layouts == *mpi* ]] && mpi_build && mpi=1
  for r in $(seq 1 "${REPEATS:-1}"); do
    sfx=$([ "${REPEATS:-1}" -gt 1 ] && echo "-$r")
    mkdir -p "$OUT/nccl-tests$sfx" "$OUT/nccl-tests-I$sfx"
    local flags=(-g 1 -b "$b" -e "$e" -f "$STEP" -d bfloat16 -w "$w" -n "$n") start=$(date +%s) run
    for layout in $layouts; do
      case $layout in
        threads) run=(/tmp/nccl-tests/build); flags+=(-t "$NGPUS"); dir=nccl-tests ;;
        mpi) [ $mpi = 1 ] || continue; run=(mpirun --allow-run-as-root -np "$NGPUS" --bind-to none /tmp/nccl-tests-mpi/build); dir=nccl-tests-mpi ;;
      esac
      mkdir -p "$OUT/$dir$sfx"
      for op in "${OPS[@]}"; do
        # mpirun takes the program as its last word: the folder and the name are joined
        timeout 120 "${run[@]:0:${#run[@]}-1}" "${run[-1]}/${op}_perf" "${flags[@]}" > "$OUT/$dir$sfx/$op.txt" 2>&1
        [ "${PER_ITER:-1}" = 1 ] && [ $layout = threads ] && timeout 120 /tmp/nccl-tests/build/${op}_perf "${flags[@]}" -I 1 > "$OUT/nccl-tests-I$sfx/$op.txt" 2>&1
        echo "== nccl-tests ($layout) $op: $(grep -c '^ ' "$OUT/$dir$sfx/$op.txt") rows"
      done
      [ $layout = threads ] && flags=("${flags[@]:0:${#flags[@]}-2}")
    done
    echo "== nccl-tests: $(( $(date +%s) - start )) s"
    local timing
    for timing in ${TIMINGS:-auto cuda_graph}; do
      start=$(date +%s)
      timeout 300 python3 -m acceptance.cli.main sweep -b "$b" -e "$e" -f "$STEP" --dtype bfloat16 -w "$w" -n "$n" \
        --timeout 280 --timing "$timing" --ops "$SUITE_OPS" \
        --evidence "$OUT/sweep-$timing$sfx" > "$OUT/sweep-$timing$sfx.txt" 2>&1
      echo "== sweep --timing $timing rc=$? in $(( $(date +%s) - start )) s"; tail -3 "$OUT/sweep-$timing$sfx.txt"
      for layout in $layouts; do
        dir=$([ $layout = mpi ] && echo nccl-tests-mpi || echo nccl-tests)
        [ -d "$OUT/$dir$sfx" ] || continue
        python3 benchmarks/nccltests_table.py "$OUT/$dir$sfx" "$OUT/sweep-$timing$sfx" \
          $([ "${PER_ITER:-1}" = 1 ] && [ $layout = threads ] && echo --per-iter "$OUT/nccl-tests-I$sfx") \
          > "$OUT/table-${NGPUS}gpu-$layout-$timing$sfx.md"
        echo "$layout: $(tail -1 "$OUT/table-${NGPUS}gpu-$layout-$timing$sfx.md")"
      done
    done
  done
}

mpi_build() {  # nccl-tests with MPI=1 into /tmp/nccl-tests-mpi, where mpicc and mpi.h are found
  [ -x /tmp/nccl-tests-mpi/build/all_reduce_perf ] && return 0
  local mpi; mpi=$(dirname "$(dirname "$(command -v mpicc 2>/dev/null || echo /nonexistent/bin/x)")")
  [ -f "$mpi/include/mpi.h" ] || mpi=$(dirname "$(dirname "$(find / -name mpi.h -path '*include*' 2>/dev/null | head -1)")")
  [ -f "$mpi/include/mpi.h" ] || { echo "== no MPI here (mpicc $(command -v mpicc), mpirun $(command -v mpirun))"; return 1; }
  rm -rf /tmp/nccl-tests-mpi && cp -r .gpu/nccl-tests /tmp/nccl-tests-mpi
  make -C /tmp/nccl-tests-mpi -j16 MPI=1 MPI_HOME="$mpi" CUDA_HOME=/usr/local/cuda NCCL_HOME=/tmp/nccl-home \
    NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" > "$OUT/build-mpi.txt" 2>&1 || { tail -5 "$OUT/build-mpi.txt"; return 1; }
  echo "== nccl-tests MPI=1 built against $mpi"
}

loop() {
  build || return 1
  export LD_LIBRARY_PATH=/tmp/nccl-home/lib:${LD_LIBRARY_PATH:-}
  local mpi=0 r n op
  mpi_build && mpi=1
  mkdir -p "$OUT/loop"
  for r in $(seq 1 "${LOOP_RUNS:-3}"); do
    [ "${LOOP_NCCL_TESTS:-1}" = 1 ] && for n in 20 200; do
      for op in all_reduce all_gather sendrecv alltoall; do
        timeout 60 /tmp/nccl-tests/build/${op}_perf -t "$NGPUS" -g 1 -b 8 -e 4M -f 2 -d bfloat16 -w 5 -n $n \
          > "$OUT/loop/threads-$op-n$n-$r.txt" 2>&1
        [ $mpi = 1 ] && timeout 60 mpirun --allow-run-as-root -np "$NGPUS" --bind-to none \
          /tmp/nccl-tests-mpi/build/${op}_perf -g 1 -b 8 -e 4M -f 2 -d bfloat16 -w 5 -n $n \
          > "$OUT/loop/mpi-$op-n$n-$r.txt" 2>&1
      done
    done
    timeout 240 torchrun --nproc-per-node "$NGPUS" benchmarks/nccl_loop_ab.py --ops "${LOOP_OPS:-all_reduce,all_gather,sendrecv,all_to_all}" \
      --sizes "${LOOP_SIZES:-32,64K,1M}" > "$OUT/loop/ab-$r.txt" 2>&1
    echo "== loop run $r rc=$?"; grep -E "us/call" "$OUT/loop/ab-$r.txt" | head -40
  done
  python3 benchmarks/nccl_loop_table.py "$OUT/loop" | tee "$OUT/loop-table.md"
}

csv() { local IFS=,; echo "$*"; }  # the words given, joined by commas (a CPU list for taskset -c)

placement() {
  build || return 1
  export LD_LIBRARY_PATH=/tmp/nccl-home/lib:${LD_LIBRARY_PATH:-}
  local mpi=0 r set cpus op allowed half max=${PLACE_MAX:-64K}
  mpi_build && mpi=1
  lscpu | grep -E '^(CPU\(s\)|Model name|Socket|NUMA|Thread|Core)' ; cat /sys/bus/pci/devices/*/numa_node 2>/dev/null | sort | uniq -c
  read -r -a allowed <<< "$(python3 -c 'import os; print(*sorted(os.sched_getaffinity(0)))')"
  half=$(( ${#allowed[@]} / 2 ))
  declare -A sets=([all]="$(csv "${allowed[@]}")" [low]="$(csv "${allowed[@]:0:$half}")" [high]="$(csv "${allowed[@]:$half}")")
  for set in ${PLACES:-all low high}; do
    [ -n "${sets[$set]:-}" ] || { echo "PLACES: $set is not one of all, low, high" >&2; return 1; }
  done
  local flags=(-g 1 -b 8 -e "$max" -f 4 -d bfloat16 -w 20 -n 200)
  for r in $(seq 1 "${PLACE_RUNS:-3}"); do
    for set in ${PLACES:-all low high}; do
      cpus=${sets[$set]}
      mkdir -p "$OUT/place-$set/nccl-tests-$r" "$OUT/place-$set/nccl-tests-mpi-$r"
      for op in "${OPS[@]}"; do
        timeout 60 taskset -c "$cpus" /tmp/nccl-tests/build/${op}_perf -t "$NGPUS" "${flags[@]}" \
          > "$OUT/place-$set/nccl-tests-$r/$op.txt" 2>&1
        [ $mpi = 1 ] && timeout 60 taskset -c "$cpus" mpirun --allow-run-as-root -np "$NGPUS" --bind-to none \
          /tmp/nccl-tests-mpi/build/${op}_perf "${flags[@]}" > "$OUT/place-$set/nccl-tests-mpi-$r/$op.txt" 2>&1
      done
      timeout 200 taskset -c "$cpus" python3 -m acceptance.cli.main sweep -b 8 -e "$max" -f 4 --dtype bfloat16 -w 20 \
        -n 200 --timeout 180 --timing auto --ops "$SUITE_OPS" --evidence "$OUT/place-$set/sweep-auto-$r" \
        > "$OUT/place-$set/sweep-auto-$r.txt" 2>&1
      echo "== placement $set ($cpus) run $r: sweep rc=$?"
    done
  done
  local named=()
  for set in ${PLACES:-all low high}; do
    echo "== $set (${sets[$set]})"; python3 benchmarks/sidebyside_medians.py "$OUT/place-$set" | tee "$OUT/place-$set.md"
    named+=("$OUT/place-$set")
  done
  [ ${#named[@]} -ge 2 ] && python3 benchmarks/sidebyside_medians.py --between "${named[0]}" "${named[1]}"
}

for mode in "${@:-compare}"; do "$mode"; done
cd "$OUT" && tar czf r.tgz --exclude='*.tgz' ./* 2> /dev/null; ls
