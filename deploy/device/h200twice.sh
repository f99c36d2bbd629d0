#!/usr/bin/env bash
# h200-x2: the default suite twice on one fresh machine (cold, then with the compile cache warm), with each
# run's probe walls and rank 0's phases
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
nvidia-smi -L; nproc
for n in 1 2; do
  start=$(date +%s.%N)
  timeout 280 python3 -m pytest -p no:cacheprovider --cluster-profile h200-x2 tests_cluster/ --cluster-evidence $OUT/h200-x2-run$n > $OUT/suite$n.txt 2>&1
  echo "rc=$? wall=$(python3 -c "import time; print(round(time.time() - $start, 1))")" >> $OUT/suite$n.txt
  grep -E "^\[cluster\]" $OUT/suite$n.txt | head -14; tail -2 $OUT/suite$n.txt
  python3 -m acceptance.cli.walls $OUT/h200-x2-run$n > $OUT/walls$n.txt
  python3 -m acceptance.cli.walls $OUT/h200-x2-run$n --phases > $OUT/phases$n.txt
  cat $OUT/walls$n.txt; grep -E "^(connectivity|storage|training) " $OUT/phases$n.txt | grep -v "all_\|collectives" | head -40
done
cd $OUT && tar czf ev.tgz h200-x2-run1 h200-x2-run2 && rm -rf h200-x2-run1 h200-x2-run2 && ls -la
