#!/usr/bin/env bash
# h200-x2: the default suite twice on one fresh machine (cold, then with the compile cache warm), training staged
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
nvidia-smi -L
for n in 1 2; do
  start=$(date +%s)
  timeout 280 python3 -m pytest -p no:cacheprovider --cluster-profile h200-x2 tests_cluster/ --cluster-evidence $OUT/h200-x2-run$n > $OUT/suite$n.txt 2>&1
  echo "rc=$? wall=$(( $(date +%s) - start ))" >> $OUT/suite$n.txt
  grep -E "^\[cluster\]" $OUT/suite$n.txt | head -12; tail -2 $OUT/suite$n.txt
  python3 deploy/device/show.py $OUT/h200-x2-run$n | grep -v "^  [a-z_]* *1M\|64M"
  python3 -m acceptance.cli.walls $OUT/h200-x2-run$n | tail -9
done
python3 -m acceptance.cli.walls $OUT/h200-x2-run2 --phases > $OUT/phases.txt
grep -E "^training" $OUT/phases.txt | head -8
cd $OUT && tar czf ev.tgz h200-x2-run1 h200-x2-run2 && rm -rf h200-x2-run1 h200-x2-run2 && ls -la
