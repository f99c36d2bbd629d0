#!/usr/bin/env bash
# The reference workload (-m llama8b: Llama-3.1-8B's shape, bf16, seq 8192, FSDP2 with each decoder layer
# compiled, then DeepSpeed ZeRO-3) on this GPU machine, once per case named (default: 1 all):
#   1    one GPU (CUDA_VISIBLE_DEVICES=0): as many of the 32 layers as it holds
#   all  every GPU of the machine (skipped where that is one GPU)
# Each case: `cluster-acceptance init` for the GPUs it sees (the peak for MFU and the bound from the DGX
# Cloud row), then one pytest of the workload under that profile, both strategies in one job.
# STEPS (default 5) timed steps after WARMUP (2); SEQ (8192); LAYERS ("fit": from the GPUs' memory).
# Then one line per case and strategy: layers run, tokens/s/GPU, MFU and its ratio to DGX Cloud's 59.4%
# (benchmarks/llama8b_table.py). Outputs (llama8b-CASE.txt, the profiles) and the evidence (ev.tgz) go to $OUT.
# CPU check of this script: CPU=1 runs the local-cpu profile's tiny config instead (no init, no wheels).
set -uo pipefail
: "${OUT:?set OUT to the folder whose contents come back}"
if [ -z "${CPU:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD NCCL_NVLS_ENABLE=0
  nvidia-smi -L
  gpus=$(nvidia-smi -L | grep -c '^GPU')
else
  export PYTHONPATH=$PWD
  gpus=1
fi
export PYTHONUNBUFFERED=1
cases=("$@")
[ ${#cases[@]} -eq 0 ] && cases=(1 all)
sets=()  # the profile's steps (init's: the family's 2 + 5), unless STEPS or WARMUP say
[ -n "${STEPS:-}" ] && sets+=(--cluster-set "llama8b.steps=$STEPS")
[ -n "${WARMUP:-}" ] && sets+=(--cluster-set "llama8b.warmup_steps=$WARMUP")
[ -n "${SEQ:-}" ] && sets+=(--cluster-set "llama8b.seq_len=$SEQ")
[ -n "${LAYERS:-}" ] && sets+=(--cluster-set "llama8b.layers=$LAYERS")
folders=()
for case in "${cases[@]}"; do
  case $case in
    1) visible=0 ;;
    all) [ "$gpus" -le 1 ] && { echo "== all: this machine has one GPU (case 1)"; continue; }
         visible=$(seq -s, 0 $((gpus - 1))) ;;
    *) echo "unknown case $case (1, all)" >&2; exit 4 ;;
  esac
  name=llama8b-$case
  if [ -z "${CPU:-}" ]; then
    CUDA_VISIBLE_DEVICES=$visible python3 -m acceptance.cli init --name "$name" --output "$OUT/$name.yaml" \
      > "$OUT/$name-init.txt" 2>&1 || { echo "== $case: init failed"; tail -5 "$OUT/$name-init.txt"; continue; }
    profile=$OUT/$name.yaml
  else
    profile=local-cpu
  fi
  start=$(date +%s.%N)
  CUDA_VISIBLE_DEVICES=$visible timeout 560 python3 -m pytest -p no:cacheprovider -p no:randomly \
    --cluster-profile "$profile" tests_cluster/test_llama8b.py "${sets[@]}" --cluster-evidence "$OUT/ev-$name" \
    > "$OUT/$name.txt" 2>&1
  echo "rc=$? wall=$(python3 -c "import time; print(round(time.time() - $start, 1))")" >> "$OUT/$name.txt"
  echo "== $case: $(tail -1 "$OUT/$name.txt")"
  grep -E "^llama8b\.|^verdict" "$OUT/$name.txt" | head -20
  folders+=("$OUT/ev-$name")
done
[ ${#folders[@]} -gt 0 ] && python3 benchmarks/llama8b_table.py "${folders[@]}" | tee "$OUT/llama8b-table.txt"
cd "$OUT" && tar czf ev.tgz ev-* && rm -rf ev-* && ls -la
