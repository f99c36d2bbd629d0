#!/usr/bin/env bash
# The soak family on one GPU machine, with gpu-burn beside it and a GPU slowed by another process.
#
#   benchmarks/soak.sh PROFILE SECONDS [STEP...]
#
# PROFILE: the GPU profile (h100-x1, h200-x2); SECONDS: each step's duration (soak.duration_s, and
# gpu-burn's run). STEPS (default: soak burn slowed), in the order given:
#   soak    pytest -m soak with the profile, --cluster-set soak.duration_s=SECONDS
#   burn    gpu-burn (built here with nvcc from .gpu/gpu-burn, carried with the tree) for SECONDS, every GPU
#   slowed  the soak again, with a bf16 matmul loop started on GPU 0 halfway through it (benchmarks/matmul_loop.py)
#   stopped the soak with a checkpoint every tenth of SECONDS, its rank 0 killed at 0.6 of it (the test knob
#           ACCEPTANCE_TEST_SOAK=kill@0:0.6): judged on its last checkpoint
# Each step's output and evidence go under $OUT (soak-<step>.txt, ev-<step>/), kept when a later step fails;
# at the end the figures per GPU of each soak, and gpu-burn's, are printed (benchmarks/soak_figures.py).
# One call has 10 minutes: "h100-x1 60 soak slowed" takes about 3, "h100-x1 240 soak burn" about 9 (a soak
# of 300 s and gpu-burn for as long do not fit one call: each step adds its start-up to its duration).
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 PROFILE SECONDS [soak|burn|slowed ...]" >&2; exit 4; }
profile=$1 seconds=$2
shift 2
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(soak burn slowed)
: "${OUT:?set OUT to the folder whose contents come back}"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
here=$PWD
nvidia-smi -L | tee "$OUT/gpus.txt"
limit=$((${seconds%.*} + 240))
delay=$((${seconds%.*} / 2 + 20))  # the slowed step's other process: from mid-soak (start-up takes about 20 s)  # the step's own duration, start-up and the checks after it

soak() {  # soak NAME [pytest options...]
  local name=$1
  shift
  local rc=0
  timeout "$limit" python3 -m pytest -p no:cacheprovider -m soak tests_cluster/ --cluster-profile "$profile" \
    --cluster-set "soak.duration_s=$seconds" --cluster-evidence "$OUT/ev-$name" "$@" > "$OUT/soak-$name.txt" 2>&1 || rc=$?
  echo "rc=$rc" >> "$OUT/soak-$name.txt"
  grep -E "^\[cluster\]|^soak|passed|failed|verdict" "$OUT/soak-$name.txt" | tail -25 || true
  # the report's time plots: TFLOP/s, clock, power and temperature per GPU
  python3 -m acceptance.cli report "$OUT/ev-$name" > "$OUT/report-$name.txt" 2>&1 || true
}

burn() {
  local build=/tmp/gpu-burn rc=0 cc
  if ! [ -f "$here/.gpu/gpu-burn/Makefile" ]; then
    echo "gpu-burn: no source in .gpu/gpu-burn (carry it with the tree)" | tee "$OUT/gpu-burn-build.txt"; return 0
  fi
  rm -rf "$build" && cp -r "$here/.gpu/gpu-burn" "$build"
  # the Makefile's COMPUTE: the compute capability without its dot (9.0 -> 90)
  cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d ' .') || cc=90
  (cd "$build" && make -s COMPUTE="$cc" CUDAPATH=/usr/local/cuda) > "$OUT/gpu-burn-build.txt" 2>&1 || rc=$?
  if [ $rc -ne 0 ]; then
    echo "gpu-burn: build failed (rc=$rc), see gpu-burn-build.txt"; tail -5 "$OUT/gpu-burn-build.txt"; return 0
  fi
  # its default: 8192^2 SGEMMs into 90% of the memory, every result compared with the first (within 0.001)
  (cd "$build" && timeout "$limit" ./gpu_burn "${seconds%.*}") > "$OUT/gpu-burn.txt" 2>&1 || rc=$?
  echo "rc=$rc" >> "$OUT/gpu-burn.txt"
  tr '\r' '\n' < "$OUT/gpu-burn.txt" | grep -E "Gflop/s|GPU [0-9]+: |rc=" | tail -4 || true
}

loop_pid=""  # the slowed step's matmul loop while it runs: the trap below ends it with the script
stop_loop() {
  [ -n "$loop_pid" ] || return 0
  # its sleep first (a child of the subshell, before the exec), then the subshell or the loop it became
  if command -v pkill > /dev/null; then pkill -P "$loop_pid" 2> /dev/null || true; fi
  kill "$loop_pid" 2> /dev/null || true
  wait "$loop_pid" 2> /dev/null || true
  loop_pid=""
}
# a script killed (or failing under set -e) mid-step must not leave the loop on GPU 0 behind it
trap stop_loop EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

slowed() {
  # another process that starts on GPU 0 once the soak runs (a process there before the run fails the
  # preflight, naming it): the soak's time plots and its first-minute-against-last figures show the drop
  (sleep "$delay" && CUDA_VISIBLE_DEVICES=0 exec python3 benchmarks/matmul_loop.py "${seconds%.*}") \
    > "$OUT/matmul-loop.txt" 2>&1 &
  loop_pid=$!
  soak slowed
  stop_loop
  cat "$OUT/matmul-loop.txt"
}

for step in "${steps[@]}"; do
  echo "=== $step ($seconds s) $(date -u +%T)"
  case $step in
    soak) soak soak ;;
    burn) burn ;;
    slowed) slowed ;;
    stopped)
      ACCEPTANCE_TEST_SOAK=kill@0:0.6 soak stopped --cluster-set "soak.checkpoint_s=$((${seconds%.*} / 10 + 1))"
      ls -la "$OUT"/ev-stopped/probes/*soak*/ || true
      ;;
    *) echo "unknown step $step (soak, burn, slowed, stopped)" >&2 ;;
  esac
done

echo "=== figures $(date -u +%T)"
for step in "${steps[@]}"; do
  case $step in
    soak | slowed)
      if [ -f "$OUT/ev-$step/evidence.json" ]; then
        burn_out=()
        [ -f "$OUT/gpu-burn.txt" ] && [ "$step" = soak ] && burn_out=("$OUT/gpu-burn.txt")
        python3 benchmarks/soak_figures.py "$OUT/ev-$step" "${burn_out[@]}" | tee "$OUT/figures-$step.txt" || true
      fi
      ;;
  esac
done
if [ -f "$OUT/gpu-burn.txt" ] && ! [ -f "$OUT/ev-soak/evidence.json" ]; then
  python3 benchmarks/soak_figures.py - "$OUT/gpu-burn.txt" | tee "$OUT/figures-burn.txt" || true
fi
ls -la "$OUT"
# one archive of the evidence folders, so that it comes back whole
mapfile -t folders < <(cd "$OUT" && ls -d ev-* 2>/dev/null)
if [ ${#folders[@]} -gt 0 ]; then tar czf "$OUT/ev.tgz" -C "$OUT" "${folders[@]}" && (cd "$OUT" && rm -rf "${folders[@]}"); fi
