#!/usr/bin/env bash
# The tiers on one GPU machine, each a fresh pytest: the runs named, in order, from
#   quick     --cluster-tier quick (the first one cold: no earlier run on the machine)
#   standard  the default suite
#   burn-in   --cluster-tier burn-in: the standard suite at the profile's full lengths, then the soak
#             (its duration and checkpoint interval: SOAK_S, default the profile's, and CHECKPOINT_S, default 300)
#   init      `cluster-acceptance init` for this node, then the default suite with the profile it wrote
# e.g. `benchmarks/tiers.sh quick quick standard quick` (PROFILE, default h100-x1, for quick and standard).
# Each run's output (tier-N-NAME.txt, with its rc and wall) and its evidence (one archive, ev.tgz) go to $OUT.
set -uo pipefail
: "${OUT:?set OUT to the folder whose contents come back}"
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl || exit 1  # bytecode compiled, as an install is
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
PROFILE=${PROFILE:-h100-x1}
nvidia-smi -L
n=0
for run in "$@"; do
  n=$((n + 1))
  name="tier-$n-$run"
  profile=$PROFILE
  options=()
  case $run in
    quick) options=(--cluster-tier quick) ;;
    standard) ;;
    burn-in)
      options=(--cluster-tier burn-in --cluster-set "soak.checkpoint_s=${CHECKPOINT_S:-300}")
      [ -n "${SOAK_S:-}" ] && options+=(--cluster-set "soak.duration_s=$SOAK_S")
      ;;
    init)
      python3 -m acceptance.cli init --name init-node --output "$OUT/init-node.yaml" | tee "$OUT/$name-init.txt"
      profile=$OUT/init-node.yaml
      ;;
    *) echo "unknown run $run (quick, standard, burn-in, init)" >&2; exit 4 ;;
  esac
  start=$(date +%s.%N)
  timeout 400 python3 -m pytest -p no:cacheprovider --cluster-profile "$profile" tests_cluster/ "${options[@]}" \
    --cluster-evidence "$OUT/ev-$name" > "$OUT/$name.txt" 2>&1
  echo "rc=$? wall=$(python3 -c "import time; print(round(time.time() - $start, 1))")" >> "$OUT/$name.txt"
  echo "== $name: $(tail -1 "$OUT/$name.txt")"
  grep -E "^verdict|^checks:|^tier|^[a-z]+ +(PASS|FAIL|passed|failed|recorded|skipped) " "$OUT/$name.txt" | head -20
  [ "$run" = init ] && python3 -m acceptance.cli report "$OUT/ev-$name" > /dev/null 2>&1 && \
    grep -o "normal for[^<]*" "$OUT/ev-$name/report.md" | sort | uniq | head -8
done
cd "$OUT" && tar czf ev.tgz ev-* && rm -rf ev-* && ls -la
