#!/usr/bin/env bash
# h100-x1 (or any one-node GPU profile, $PROFILE): the default suite of the code in .gpu/old (a `git archive`
# of the commit to compare against, with conftest.py) and of this tree, in the order given ("old new" or
# "new old"), then every figure's name and verdict of the two runs compared (same_figures.py). SUITE: the test
# modules both runs take (default tests_cluster/, e.g. tests_cluster/test_collectives.py on a two-GPU profile);
# ARGS: more pytest arguments for both (e.g. "--cluster-set collectives.timing=cuda_graph")
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
PROFILE=${PROFILE:-h100-x1}
read -r -a SUITE <<< "${SUITE:-tests_cluster/}"
read -r -a ARGS <<< "${ARGS:-}"
nvidia-smi -L
here=$PWD
for v in "$@"; do
  if [ "$v" = old ]; then cd "$here/.gpu/old" || exit 1; else cd "$here" || exit 1; fi
  start=$(date +%s.%N)
  PYTHONPATH=/tmp/site:$PWD timeout 280 python3 -m pytest -p no:cacheprovider --cluster-profile "$PROFILE" "${SUITE[@]}" "${ARGS[@]}" \
    --cluster-evidence "$OUT/$v" > "$OUT/$v.txt" 2>&1
  echo "rc=$? wall=$(python3 -c "import time; print(round(time.time() - $start, 1))")" >> "$OUT/$v.txt"
  echo "== $v: $(tail -1 "$OUT/$v.txt")"
  grep -E "^checks:|^verdict:" "$OUT/$v.txt"; tail -2 "$OUT/$v.txt" | head -1
  PYTHONPATH=/tmp/site:$PWD python3 -m acceptance.cli.walls "$OUT/$v" > "$OUT/walls-$v.txt"
done
cd "$here" || exit 1
python3 benchmarks/same_figures.py "$OUT/old" "$OUT/new" | tee "$OUT/same_figures.txt"
cd "$OUT" && tar czf "ev-$1-$2.tgz" old new && rm -rf old new && ls -la
